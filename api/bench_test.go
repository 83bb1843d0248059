package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// BenchmarkIssue measures POST /v1/commands end to end (HTTP, decode, one
// table batch and one enqueue on the embedded store), sequentially and with
// parallel clients.
func BenchmarkIssue(b *testing.B) {
	s := apitest.Start(b, apitest.Options{Tokens: apitest.Tokens()})
	issue := func(b *testing.B) {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/commands", strings.NewReader(`{"type":"SendEmail","params":{"to":"a@example.com","subject":"hello"}}`))
		req.Header.Set("Authorization", "Bearer "+apitest.IssuerToken)
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusAccepted {
			b.Fatalf("status %d", r.StatusCode)
		}
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			issue(b)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				issue(b)
			}
		})
	})
}

// BenchmarkGet measures GET /v1/commands/{id} (one table point read).
func BenchmarkGet(b *testing.B) {
	s := apitest.Start(b, apitest.Options{Tokens: apitest.Tokens()})
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/commands", strings.NewReader(`{"type":"A"}`))
	req.Header.Set("Authorization", "Bearer "+apitest.IssuerToken)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	r.Body.Close()
	loc := r.Header.Get("Location")
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodGet, s.URL+loc, nil)
		req.Header.Set("Authorization", "Bearer "+apitest.ReaderToken)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			b.Fatalf("status %d", r.StatusCode)
		}
	}
}
