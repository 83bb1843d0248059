package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// recorder is an http.RoundTripper that keeps what each request asked and
// what came back.
type recorder struct {
	mu   sync.Mutex
	seen []exchange
}

type exchange struct {
	inm, prefer, lastID, applied string
	code                         int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	x := exchange{inm: req.Header.Get("If-None-Match"), prefer: req.Header.Get("Prefer"), lastID: req.Header.Get("Last-Event-ID")}
	if err == nil {
		x.code, x.applied = resp.StatusCode, resp.Header.Get("Preference-Applied")
	}
	r.mu.Lock()
	r.seen = append(r.seen, x)
	r.mu.Unlock()
	return resp, err
}

func (r *recorder) all() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.seen...)
}

// stepper is a command whose handler records a step each time step is
// sent to, twice, then completes.
type stepper struct{}

func (stepper) CommandType() string { return "Stepper" }

// TestWaitLongPolls: Wait asks the server to wait (If-None-Match with the
// ETag it has, Prefer: wait), renews on 304, and returns the final status
// as soon as the server's processor records it.
func TestWaitLongPolls(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := apitest.Start(t, apitest.Options{
		Config: cmdq.Config{StartedWriteDelay: time.Hour},
		Setup: func(c *cmdq.Client) error {
			return cmdq.Register(c, func(ctx context.Context, _ stepper, _ *cmdq.Attempt) error {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		},
		API: func(c *api.Config) { c.MaxWait = 500 * time.Millisecond },
	})
	rec := &recorder{}
	c := newClient(t, s.URL, client.WithHTTPClient(&http.Client{Transport: rec, Timeout: 30 * time.Second}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Issue(ctx, client.IssueRequest{Type: "Stepper"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		st  cmdq.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := c.Wait(ctx, res.ID)
		done <- result{st, err}
	}()
	// Wait renews its long-poll while nothing changes: 304s, each after
	// the server's (cut) wait.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := 0
		for _, x := range rec.all() {
			if x.code == http.StatusNotModified {
				n++
				// MaxWait is 500 ms: the server cuts the wait to it and
				// says so in whole seconds, rounded up.
				if x.inm == "" || x.prefer != "wait=20" || x.applied != "wait=1" {
					t.Fatalf("a 304 without the long-poll headers: %+v", x)
				}
			}
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Wait did not renew its long-poll: %+v", rec.all())
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	r := <-done
	if r.err != nil || r.st.State != cmdq.StateCompleted {
		t.Fatalf("Wait: %+v %v", r.st, r.err)
	}
	// The issue, Wait's first read (no condition), then long-polls only;
	// the last one answered with the change.
	xs := rec.all()
	for i, x := range xs[2:] {
		if x.inm == "" || x.prefer == "" {
			t.Fatalf("request %d is not a long-poll: %+v", i+2, xs)
		}
	}
	if last := xs[len(xs)-1]; last.code != http.StatusOK {
		t.Fatalf("the last answer: %+v", last)
	}
}

// TestFollow: Follow streams a command's events and statuses until it is
// final, reconnecting with Last-Event-ID when the server ends a stream
// early (MaxStream), without repeating or losing an event.
func TestFollow(t *testing.T) {
	t.Parallel()
	steps := make(chan struct{})
	s := apitest.Start(t, apitest.Options{
		Config: cmdq.Config{StartedWriteDelay: time.Hour},
		Setup: func(c *cmdq.Client) error {
			return cmdq.Register(c, func(ctx context.Context, _ stepper, run *cmdq.Attempt) error {
				for i := 1; i <= 2; i++ {
					select {
					case <-steps:
					case <-ctx.Done():
						return ctx.Err()
					}
					if err := run.CompleteStep(ctx, i, ""); err != nil {
						return err
					}
				}
				return nil
			})
		},
		API: func(c *api.Config) { c.MaxStream = 300 * time.Millisecond },
	})
	rec := &recorder{}
	c := newClient(t, s.URL, client.WithHTTPClient(&http.Client{Transport: rec, Timeout: 5 * time.Second}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Issue(ctx, client.IssueRequest{Type: "Stepper"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		seqs   []int64
		states []cmdq.State
	)
	type result struct {
		st  cmdq.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := c.Follow(ctx, res.ID, 0, func(e cmdq.Event) {
			mu.Lock()
			seqs = append(seqs, e.Seq)
			mu.Unlock()
		}, func(st cmdq.Status) {
			mu.Lock()
			states = append(states, st.State)
			mu.Unlock()
		})
		done <- result{st, err}
	}()
	// The stream ends every 300 ms (and outlives the client's own 5 s
	// timeout); Follow reconnects after the server's retry delay, resuming.
	waitReconnects := func(n int) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			k := 0
			for _, x := range rec.all() {
				if x.lastID != "" {
					k++
				}
			}
			if k >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Follow did not reconnect %d times: %+v", n, rec.all())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReconnects(1)
	steps <- struct{}{}
	waitReconnects(3)
	steps <- struct{}{}
	r := <-done
	if r.err != nil || r.st.State != cmdq.StateCompleted {
		t.Fatalf("Follow: %+v %v", r.st, r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("events seen %v: want 1..5 once each, in order", seqs)
		}
	}
	if len(seqs) != 5 || states[len(states)-1] != cmdq.StateCompleted {
		t.Fatalf("events %v, statuses %v", seqs, states)
	}
	// A command that does not exist is an error at once.
	if _, err := c.Follow(ctx, uuid.NewString(), 0, nil, nil); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("Follow of an unknown command: %v", err)
	}
}
