package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// Why a command waits, as GET /v1/commands/{id} says it (Status.Waiting).
// Every answer is checked against api/openapi.json.

// waitJob is the handler the tests control: it fails its first attempt
// when Fail, and runs until the test releases it when Hold.
type waitJob struct {
	Fail bool `json:"fail"`
	Hold bool `json:"hold"`
}

func (waitJob) CommandType() string { return "test.wait" }

// registerWaitJob registers waitJob with a retry an hour after a failure;
// held handlers return when release is closed.
func registerWaitJob(c *cmdq.Client, release <-chan struct{}) error {
	return cmdq.RegisterWith(c, func(ctx context.Context, j waitJob, a *cmdq.Attempt) error {
		if j.Fail && a.Number() == 1 {
			return errors.New("test.wait: planned failure of attempt 1")
		}
		if j.Hold {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: time.Hour, Max: time.Hour, Jitter: cmdq.NoJitter}})
}

// issueJob issues a waitJob with params through the API and returns its ID.
func (c specClient) issueJob(body string) string {
	c.t.Helper()
	r := c.expect(http.StatusAccepted, http.MethodPost, "/v1/commands", "application/json", body)
	var res client.IssueResponse
	if err := json.Unmarshal(r.body, &res); err != nil {
		c.t.Fatal(err)
	}
	return res.ID
}

// status reads command id's status (path may add a query: "?wait=…").
func (c specClient) status(id, query string) cmdq.Status {
	c.t.Helper()
	r := c.expect(http.StatusOK, http.MethodGet, "/v1/commands/"+id+query, "", "")
	var st cmdq.Status
	if err := json.Unmarshal(r.body, &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

// wantWaiting checks that st waits for reason and returns its Waiting.
func wantWaiting(t *testing.T, what string, st cmdq.Status, reason cmdq.WaitReason) *cmdq.Waiting {
	t.Helper()
	if st.Waiting == nil || st.Waiting.Reason != reason {
		t.Fatalf("%s: %s waiting %+v, want %s", what, st.State, st.Waiting, reason)
	}
	return st.Waiting
}

// longPolls counts a processor's polls (dequeues) after which it waits
// at least long before the next (Observer).
type longPolls struct {
	long time.Duration
	n    atomic.Int32
}

func (p *longPolls) Observe(o cmdq.Observation) {
	if o.Kind == cmdq.ObservedPolled && !o.Paused && o.Wait >= p.long {
		p.n.Add(1)
	}
}

// TestStatusSaysWhyItWaits: on both stores, GET /v1/commands/{id} (and its
// long-poll) says why a command has not started: no processor polls its
// queue; scheduled until its run-at time; its queue paused, by whom and
// since when (as GET /v1/queues says); due, once an idle processor in
// another process polls the queue (and has not polled since the command
// was issued).
func TestStatusSaysWhyItWaits(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		// The web tier: no processor (nothing registered, never started).
		front := apitest.Start(t, apitest.Options{Store: env.Store, Prefix: env.Prefix, Config: cmdq.Config{Doorbell: cmdq.Doorbell{Off: true}}})
		c := specClient{t, spec, front.URL}

		alone := c.issueJob(`{"type":"test.wait"}`)
		wantWaiting(t, "no processor", c.status(alone, ""), cmdq.WaitNoProcessor)
		wantWaiting(t, "no processor, long-poll", c.status(alone, "?wait=100ms"), cmdq.WaitNoProcessor)

		before := time.Now()
		later := c.issueJob(`{"type":"test.wait","delay":"1h"}`)
		w := wantWaiting(t, "scheduled", c.status(later, ""), cmdq.WaitScheduled)
		if w.Until.Before(before.Add(time.Hour).Add(-time.Second)) || w.Until.After(time.Now().Add(time.Hour+time.Second)) {
			t.Fatalf("scheduled until %s, want an hour after the issue (%s)", w.Until, before)
		}

		c.expect(http.StatusOK, http.MethodPost, "/v1/queues/commands/pause", "", "")
		var qs client.QueuesResponse
		if err := json.Unmarshal(c.expect(http.StatusOK, http.MethodGet, "/v1/queues", "", "").body, &qs); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(qs.Queues, func(q cmdq.QueueInfo) bool { return q.Name == cmdq.DefaultQueue })
		if i < 0 || !qs.Queues[i].Paused {
			t.Fatalf("queues %+v: commands not paused", qs.Queues)
		}
		paused := c.issueJob(`{"type":"test.wait"}`)
		w = wantWaiting(t, "paused", c.status(paused, ""), cmdq.WaitPaused)
		if q := qs.Queues[i]; w.By != q.By || w.By != "api:anonymous" || !w.Since.Equal(q.Since) {
			t.Fatalf("paused by %q since %s; GET /v1/queues says by %q since %s (want api:anonymous)", w.By, w.Since, q.By, q.Since)
		}
		wantWaiting(t, "scheduled in a paused queue", c.status(later, ""), cmdq.WaitScheduled) // its time comes first
		c.expect(http.StatusOK, http.MethodPost, "/v1/queues/commands/resume", "", "")

		// A processor in another process that polls once a minute, and
		// hears no wake-ups: after its first poll, what is issued is due
		// until its next.
		polls := &longPolls{long: 30 * time.Second}
		idle, err := cmdq.New(instrument.Wrap(env.Store.Store, instrument.Hooks{}), cmdq.Config{Prefix: env.Prefix, Worker: "idle",
			MinPollInterval: time.Minute, MaxPollInterval: time.Minute, ReconcileInterval: cmdq.NoReconcile,
			Doorbell: cmdq.Doorbell{Off: true}, Observers: []cmdq.Observer{polls}})
		if err != nil {
			t.Fatal(err)
		}
		if err := registerWaitJob(idle, nil); err != nil {
			t.Fatal(err)
		}
		if err := idle.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = idle.Stop(context.Background()) })
		waitFor(t, 30*time.Second, "the idle processor polled the queue and is listed", func() bool {
			var ps client.ProcessorsResponse
			if err := json.Unmarshal(c.expect(http.StatusOK, http.MethodGet, "/v1/processors", "", "").body, &ps); err != nil {
				t.Fatal(err)
			}
			return polls.n.Load() > 0 && len(ps.Processors) == 1 && ps.Processors[0].Name == "idle"
		})
		due := c.issueJob(`{"type":"test.wait"}`)
		wantWaiting(t, "due", c.status(due, ""), cmdq.WaitDue)
		waitFor(t, 30*time.Second, "the first command, taken by the idle processor, completed and waits for nothing", func() bool {
			st := c.status(alone, "")
			return st.State == cmdq.StateCompleted && st.Waiting == nil
		})
	})
}

// TestStatusSaysWhyItWaitsForASlotOrRetry: on both stores, with the
// server's processor of one slot, a command whose first attempt failed is
// retrying until its next attempt (an hour ahead); one the handler runs
// waits for nothing; one issued while the slot is taken waits for a slot,
// and for nothing once it completed.
func TestStatusSaysWhyItWaitsForASlotOrRetry(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		release := make(chan struct{})
		srv := apitest.Start(t, apitest.Options{Store: env.Store, Prefix: env.Prefix, Config: cmdq.Config{Concurrency: 1},
			Setup: func(c *cmdq.Client) error { return registerWaitJob(c, release) }})
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
		c := specClient{t, spec, srv.URL}

		flaky := c.issueJob(`{"type":"test.wait","params":{"fail":true}}`)
		waitFor(t, 30*time.Second, "the first attempt failed", func() bool { return c.status(flaky, "").State == cmdq.StateRetrying })
		w := wantWaiting(t, "retrying", c.status(flaky, ""), cmdq.WaitRetrying)
		if d := time.Until(w.Until); d < 50*time.Minute || d > time.Hour {
			t.Fatalf("retrying until %s (in %s), want about an hour from now", w.Until, d)
		}

		busy := c.issueJob(`{"type":"test.wait","params":{"hold":true}}`)
		waitFor(t, 30*time.Second, "the handler runs", func() bool { _, ok := srv.Client.Running(busy); return ok })
		if st := c.status(busy, ""); st.Waiting != nil {
			t.Fatalf("a running command (%s) waits: %+v", st.State, st.Waiting)
		}
		queued := c.issueJob(`{"type":"test.wait"}`)
		wantWaiting(t, "every slot taken", c.status(queued, ""), cmdq.WaitSlot)
		close(release)
		waitFor(t, 30*time.Second, "the queued command completed", func() bool {
			st := c.status(queued, "")
			return st.State == cmdq.StateCompleted && st.Waiting == nil
		})
	})
}
