package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
)

func TestDecodeIssueRequest(t *testing.T) {
	t.Parallel()
	req, p := api.DecodeIssueRequest(strings.NewReader(`{"type":"SendEmail","params":{ "to" : "a" },"id":"0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10","correlationId":"c"}`), 0)
	if p != nil {
		t.Fatal(p)
	}
	want := client.IssueRequest{Type: "SendEmail", Params: json.RawMessage(`{"to":"a"}`), ID: "0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10", CorrelationID: "c"}
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("got %+v, want %+v", req, want)
	}
	for _, body := range []string{`{"type":"A"}`, `{"type":"A","params":null}`} {
		req, p = api.DecodeIssueRequest(strings.NewReader(body), 0)
		if p != nil || string(req.Params) != "{}" {
			t.Fatalf("%s: params %s, problem %v", body, req.Params, p)
		}
	}
	// The limit counts bytes exactly.
	body := `{"type":"A"}`
	if _, p := api.DecodeIssueRequest(strings.NewReader(body), int64(len(body))); p != nil {
		t.Fatalf("body at the limit rejected: %v", p)
	}
	if _, p := api.DecodeIssueRequest(strings.NewReader(body), int64(len(body)-1)); p == nil || p.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over the limit: %v", p)
	}
}

// FuzzDecodeIssueRequest: decoding never panics; a rejection is a complete
// problem; an accepted request re-encodes to a body that decodes to the same
// request.
func FuzzDecodeIssueRequest(f *testing.F) {
	for _, s := range []string{
		`{"type":"SendEmail","params":{"to":"a@example.com"}}`,
		`{"type":"A","params":{},"id":"0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10","correlationId":"x"}`,
		`{"type":"A","params":null}`,
		`{"type":"A","params":[1,2]}`,
		`{"type":"A","params":{"nested":{"a":[1,{"b":null}]}}} `,
		`{"type":"1A"}`,
		`{"TYPE":"A"}`,
		`{"type":"A","type":"B"}`,
		`{"type":"A","params":{"a":[{"k":1,"K":2}]}}`,
		`{"type":"A","extra":1}`,
		`{"type":"A"}{}`,
		`{"type":"A","id":"0B9F7A4E-3C1D-4E2A-9F61-2D8C5B7E4A10"}`,
		`{"type":"A","params":{"s":"\u00e9\ud83d\ude00"}}`,
		`[]`, `null`, `"x"`, ``, `{`, `{"type":`, "{\"type\":\"A\",\"params\":{\"a\":1e400}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, p := api.DecodeIssueRequest(bytes.NewReader(data), 1<<16)
		if p != nil {
			if p.Type == "" || p.Title == "" || p.Detail == "" || p.Status < 400 || p.Status > 499 {
				t.Fatalf("incomplete problem %+v for %q", p, data)
			}
			if _, err := json.Marshal(p); err != nil {
				t.Fatalf("problem does not encode: %v", err)
			}
			return
		}
		if req.Type == "" || len(req.Params) == 0 || req.Params[0] != '{' {
			t.Fatalf("accepted %q as %+v", data, req)
		}
		var enc bytes.Buffer
		e := json.NewEncoder(&enc)
		e.SetEscapeHTML(false)
		if err := e.Encode(req); err != nil {
			t.Fatalf("re-encode %+v: %v", req, err)
		}
		again, p := api.DecodeIssueRequest(bytes.NewReader(enc.Bytes()), 1<<16)
		if p != nil {
			t.Fatalf("re-encoded %s rejected: %v", enc.Bytes(), p)
		}
		if !reflect.DeepEqual(req, again) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", req, again)
		}
	})
}
