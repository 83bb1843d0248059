package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestCancelAndQueues: Cancel cancels a pending command (then Already),
// refuses an ended one (ErrConflict) and an unknown one (ErrNotFound);
// PauseQueue and ResumeQueue change what Queues lists, and an unknown
// queue is ErrNotFound.
func TestCancelAndQueues(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	issuer := newClient(t, s.URL, client.WithToken(apitest.IssuerToken))
	operator := newClient(t, s.URL, client.WithToken(apitest.OperatorToken))
	ctx := context.Background()

	res, err := issuer.Issue(ctx, client.IssueRequest{Type: "SendEmail"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := issuer.Cancel(ctx, res.ID)
	if err != nil || got.Already || got.Status.State != cmdq.StateCancelled || got.Status.ID != res.ID {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if got, err = operator.Cancel(ctx, res.ID); err != nil || !got.Already {
		t.Fatalf("cancel again: %+v %v", got, err)
	}
	ended, err := issuer.Issue(ctx, client.IssueRequest{Type: "SendEmail"})
	if err != nil {
		t.Fatal(err)
	}
	s.Poison(t, ended.ID, "test", "boom")
	if _, err := issuer.Cancel(ctx, ended.ID); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("cancel of a poisoned command: %v, want ErrConflict", err)
	}
	if _, err := issuer.Cancel(ctx, "7f0c2a9e-3b1d-4c8e-9f6a-1d2e3f4a5b6c"); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("cancel of an unknown command: %v, want ErrNotFound", err)
	}

	q, err := operator.PauseQueue(ctx, cmdq.DefaultQueue)
	if err != nil || !q.Paused || q.Name != cmdq.DefaultQueue || q.By == "" || q.Depth != 2 {
		t.Fatalf("pause: %+v %v (want paused, by someone, depth 2)", q, err)
	}
	qs, err := operator.Queues(ctx)
	if err != nil || len(qs) != 1 || !qs[0].Paused {
		t.Fatalf("queues: %+v %v", qs, err)
	}
	if q, err = operator.ResumeQueue(ctx, cmdq.DefaultQueue); err != nil || q.Paused {
		t.Fatalf("resume: %+v %v", q, err)
	}
	if _, err := operator.PauseQueue(ctx, "nobody-knows"); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("pause of an unknown queue: %v, want ErrNotFound", err)
	}
	if _, err := operator.PauseQueue(ctx, "Bad_Name"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("pause of a bad name: %v, want ErrInvalid", err)
	}
	if _, err := issuer.PauseQueue(ctx, cmdq.DefaultQueue); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("pause by an issuer: %v, want ErrForbidden", err)
	}
}

// echoCmd is a command type the client tests register.
type echoCmd struct {
	N int `json:"n"`
}

func (echoCmd) CommandType() string { return "test.echo" }

// TestUniqueAndPeriodic: Issue with a uniqueKey returns the first command
// for the same key within the window (Existing and Duplicate), whatever
// the params; a bad window is ErrInvalid. Periodic lists the server's
// schedule with its last tick's command (the every-second schedule has
// issued one) and its next tick.
func TestUniqueAndPeriodic(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), Setup: func(c *cmdq.Client) error {
		return errors.Join(
			cmdq.Register(c, func(context.Context, echoCmd, *cmdq.Attempt) error { return nil }),
			c.Periodic("test.heartbeat", "@every 1s", echoCmd{N: 7}))
	}})
	issuer := newClient(t, s.URL, client.WithToken(apitest.IssuerToken))
	reader := newClient(t, s.URL, client.WithToken(apitest.ReaderToken))
	ctx := context.Background()
	first, err := issuer.Issue(ctx, client.IssueRequest{Type: "test.echo", Params: []byte(`{"n":1}`), UniqueKey: "k-1", UniqueWindow: "1h"})
	if err != nil || first.Existing || first.Duplicate {
		t.Fatalf("first: %+v %v", first, err)
	}
	dup, err := issuer.Issue(ctx, client.IssueRequest{Type: "test.echo", Params: []byte(`{"n":2}`), UniqueKey: "k-1", UniqueWindow: "1h"})
	if err != nil || !dup.Existing || !dup.Duplicate || dup.ID != first.ID {
		t.Fatalf("duplicate: %+v %v, want the first command %s", dup, err, first.ID)
	}
	if _, err := issuer.Issue(ctx, client.IssueRequest{Type: "test.echo", UniqueKey: "k-1", UniqueWindow: "-1h"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a negative window: %v, want ErrInvalid", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, err := reader.Periodic(ctx)
		if err != nil || len(ps) != 1 {
			t.Fatalf("Periodic: %+v %v", ps, err)
		}
		p := ps[0]
		if p.Name != "test.heartbeat" || p.Type != "test.echo" || p.Spec != "@every 1s" || !p.Local || p.NextTick.IsZero() {
			t.Fatalf("Periodic: %+v", p)
		}
		if p.LastTick != nil && !p.LastTick.Missed && p.LastTick.State != "" {
			st, err := reader.Get(ctx, p.LastTick.ID)
			if err != nil || st.Type != "test.echo" {
				t.Fatalf("the last tick's command %s: %+v %v", p.LastTick.ID, st, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tick issued after 30 s: %+v", p)
		}
		time.Sleep(100 * time.Millisecond) // polling for the next tick's command
	}
}

// TestScheduleAndRunNow: the At and After options schedule a command
// (scheduled, with its runAt); RunNow makes it due (pending), and refuses
// one that is not waiting (ErrConflict) or unknown (ErrNotFound).
func TestScheduleAndRunNow(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens()})
	issuer := newClient(t, s.URL, client.WithToken(apitest.IssuerToken))
	operator := newClient(t, s.URL, client.WithToken(apitest.OperatorToken))
	ctx := context.Background()
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	res, err := issuer.Issue(ctx, client.IssueRequest{Type: "SendEmail"}, client.At(at))
	if err != nil || res.Status != cmdq.StateScheduled || !res.RunAt.Equal(at) {
		t.Fatalf("issue at %s: %+v %v", at, res, err)
	}
	later, err := issuer.Issue(ctx, client.IssueRequest{Type: "SendEmail"}, client.After(90*time.Second))
	if err != nil || later.Status != cmdq.StateScheduled || time.Until(later.RunAt) < 80*time.Second {
		t.Fatalf("issue after 90s: %+v %v", later, err)
	}
	if st, err := operator.Get(ctx, res.ID); err != nil || st.State != cmdq.StateScheduled || !st.RunAt.Equal(at) {
		t.Fatalf("status: %+v %v", st, err)
	}
	st, err := operator.RunNow(ctx, res.ID)
	if err != nil || st.State != cmdq.StatePending || !st.RunAt.Before(at) {
		t.Fatalf("run-now: %+v %v", st, err)
	}
	if _, err := operator.RunNow(ctx, res.ID); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("run-now of a pending command: %v, want ErrConflict", err)
	}
	if _, err := issuer.RunNow(ctx, later.ID); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("run-now with an issuer token: %v, want ErrForbidden", err)
	}
	if _, err := operator.RunNow(ctx, "7f0c2a9e-3b1d-4c8e-9f6a-1d2e3f4a5b6c"); !errors.Is(err, cmdq.ErrNotFound) {
		t.Fatalf("run-now of an unknown command: %v, want ErrNotFound", err)
	}
}
