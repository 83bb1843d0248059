package api

import (
	_ "embed"
	"encoding/json"
	"net/http"
)

// The OpenAPI 3.1 description of this API (openapi.json, embedded), served
// at GET /v1/openapi.json without authentication, so a web front end can
// generate its client. api/openapi_test.go checks real responses of every
// documented operation against it; change both with the routes.

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the OpenAPI 3.1 description of the HTTP API as JSON, with
// servers "/" (GET /v1/openapi.json answers it with the handler's BasePath).
func OpenAPI() []byte { return append([]byte(nil), openAPIDoc...) }

// openAPIFor returns the description with servers set to basePath ("" =
// the document as embedded).
func openAPIFor(basePath string) ([]byte, error) {
	if basePath == "" {
		return openAPIDoc, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		return nil, err
	}
	servers, err := json.Marshal([]map[string]string{{"url": basePath}})
	if err != nil {
		return nil, err
	}
	doc["servers"] = servers
	return json.MarshalIndent(doc, "", "  ")
}

// openAPI answers GET /v1/openapi.json.
func (s *server) openAPI(doc []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(doc)
		}
	}
}
