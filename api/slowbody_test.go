package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// slowServer is a server with a short request deadline (500 ms) under an
// http.Server that would let a connection read for 10 minutes, as a user's
// server with generous timeouts does: what ends a slow request is the
// handler's own bound.
func slowServer(t *testing.T, tokens api.Tokens) *apitest.Server {
	return apitest.Start(t, apitest.Options{Tokens: tokens,
		API:  func(c *api.Config) { c.RequestTimeout = 500 * time.Millisecond },
		HTTP: func(s *http.Server) { s.ReadTimeout = 10 * time.Minute; s.ReadHeaderTimeout = 10 * time.Minute },
	})
}

// rawConn opens a TCP connection to the server.
func rawConn(t *testing.T, s *apitest.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin reads c until the server closes it; it fails the test if
// that takes longer than wait (far above the 500 ms bound it checks, so
// that load does not change the outcome; without the bound the server
// keeps the connection for minutes). It returns what was read.
func closedWithin(t *testing.T, c net.Conn, wait time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the server kept the connection open for %s after a slow body (read so far %q): %v", wait, b, err)
	}
	return string(b)
}

// TestSlowBodyEndsConnection: a client that sends headers and then its
// body slowly (slowloris) must not hold the connection past the request
// deadline, authenticated or not.
func TestSlowBodyEndsConnection(t *testing.T) {
	t.Parallel()
	s := slowServer(t, apitest.Tokens())
	for _, tc := range []struct{ name, auth, wantStatus string }{
		{"unauthenticated", "", "HTTP/1.1 401"},
		{"authenticated", "Authorization: Bearer " + apitest.IssuerToken + "\r\n", "HTTP/1.1 400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rawConn(t, s)
			fmt.Fprintf(c, "POST /v1/commands HTTP/1.1\r\nHost: localhost\r\n%sContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"type\":", tc.auth)
			got := closedWithin(t, c, 60*time.Second)
			if !strings.HasPrefix(got, tc.wantStatus) {
				t.Fatalf("answer %q, want %s…", got, tc.wantStatus)
			}
			if tc.auth != "" && !strings.Contains(got, "did not arrive within the request deadline") {
				t.Fatalf("answer %q does not say why", got)
			}
		})
	}
}

// TestExpectContinueOverLimit: a request that announces a body over the
// limit with Expect: 100-continue gets 413 at once, not 100 Continue (the
// client would then send the whole body for nothing).
func TestExpectContinueOverLimit(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{MaxBodyBytes: 1000})
	c := rawConn(t, s)
	fmt.Fprintf(c, "POST /v1/commands HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1001\r\nExpect: 100-continue\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("answer %d %s, want 413 without 100 Continue", resp.StatusCode, body)
	}
	if !strings.Contains(string(body), "1000-byte limit") {
		t.Fatalf("413 body %s", body)
	}
	// Within the limit, the client is told to go on.
	c2 := rawConn(t, s)
	fmt.Fprintf(c2, "POST /v1/commands HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 12\r\nExpect: 100-continue\r\n\r\n")
	_ = c2.SetReadDeadline(time.Now().Add(60 * time.Second))
	line, err := bufio.NewReader(c2).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("within the limit: %q %v, want 100 Continue", line, err)
	}
}
