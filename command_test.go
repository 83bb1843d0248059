package cmdq_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// orderCmd records an output: attempt 1 records one and fails (its output is
// not kept), or records one over the limit when Big; attempt 2 records
// the order number and completes.
type orderCmd struct {
	Big bool `json:"big"`
}

func (orderCmd) CommandType() string { return "out.order" }

func registerOrder(t *testing.T, c *cmdq.Client, sizeErr chan<- error) {
	t.Helper()
	err := cmdq.RegisterWith(c, func(ctx context.Context, o orderCmd, run *cmdq.Attempt) error {
		if run.Number() == 1 {
			if o.Big {
				err := run.SetOutput(strings.Repeat("x", cmdq.MaxOutputBytes))
				sizeErr <- err
				return nil // the attempt fails with SetOutput's error all the same
			}
			if err := run.SetOutput(map[string]any{"attempt": 1}); err != nil {
				return err
			}
			return errors.New("the first attempt fails after recording an output")
		}
		return run.SetOutput(map[string]any{"orderNumber": 4711, "attempt": run.Number()})
	}, cmdq.HandlerOptions{Retry: cmdq.RetryPolicy{Base: 1, Max: 1, Jitter: cmdq.NoJitter}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOutput: a handler's recorded output is returned with the status of
// the completed command, through Go (Get and Wait) and the HTTP API
// ("output" in GET /v1/commands/{id}); the output of a failed attempt is
// not kept (the retried command has the completing attempt's); an
// output over MaxOutputBytes makes SetOutput return ErrOutputTooLarge and
// fails the attempt with that error even though the handler returned nil.
// Listings leave the output out. Both stores.
func TestOutput(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, s store) {
		ctx := ctxT(t)
		sizeErr := make(chan error, 1)
		srv := apitest.Start(t, apitest.Options{Store: s.st, Prefix: s.prefix, Config: fast(), Setup: func(c *cmdq.Client) error {
			registerOrder(t, c, sizeErr)
			return nil
		}})
		c := srv.Client
		res, err := c.Issue(ctx, orderCmd{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx, res.ID)
		if err != nil || st.State != cmdq.StateCompleted || st.Attempts != 2 {
			t.Fatalf("wait: %+v %v", st, err)
		}
		const want = `{"attempt":2,"orderNumber":4711}`
		if st.Output != want {
			t.Errorf("Wait's output %q, want %s", st.Output, want)
		}
		if got, err := c.Get(ctx, res.ID); err != nil || got.Output != want {
			t.Errorf("Get's output %q %v, want %s", got.Output, err, want)
		}
		var decoded struct {
			OrderNumber int `json:"orderNumber"`
		}
		if err := st.Output.Decode(&decoded); err != nil || decoded.OrderNumber != 4711 {
			t.Errorf("Output.Decode: %+v %v", decoded, err)
		}
		resp, err := http.Get(srv.URL + "/v1/commands/" + res.ID)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var wire struct {
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(body, &wire); err != nil || string(wire.Output) != want {
			t.Errorf("GET /v1/commands/{id}: %s; want \"output\":%s", body, want)
		}
		page, err := c.ListCommands(ctx, cmdq.CommandQuery{Type: "out.order"})
		if err != nil || len(page.Commands) != 1 || page.Commands[0].Output != "" {
			t.Errorf("listing %+v %v: want the command without its output", page, err)
		}

		big, err := c.Issue(ctx, orderCmd{Big: true})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-sizeErr:
			if !errors.Is(err, cmdq.ErrOutputTooLarge) {
				t.Errorf("SetOutput of %d bytes: %v, want ErrOutputTooLarge", cmdq.MaxOutputBytes+2, err)
			}
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		st, err = c.Wait(ctx, big.ID)
		if err != nil || st.State != cmdq.StateCompleted || st.Attempts != 2 {
			t.Fatalf("big: %+v %v, want completed on attempt 2", st, err)
		}
		evs, err := c.Events(ctx, big.ID)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(evs, func(e cmdq.Event) bool { return e.Kind == cmdq.EventFailed })
		if i < 0 || evs[i].Attempt != 1 || !strings.Contains(evs[i].Error, "the limit is 32768 bytes") || !strings.Contains(evs[i].Error, "32770 bytes") {
			t.Fatalf("events %+v: want attempt 1 failed with the output's size and the limit", evs)
		}
	})
}

// TestOutputInvalid: a value json.Marshal refuses makes SetOutput return
// ErrInvalidOutput; a later valid SetOutput clears it, and the last value
// wins.
func TestOutputInvalid(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	ctx := ctxT(t)
	c := newClient(t, s, fast())
	errs := make(chan error, 1)
	if err := cmdq.Register(c, func(ctx context.Context, g greet, run *cmdq.Attempt) error {
		errs <- run.SetOutput(func() {})
		_ = run.SetOutput("first")
		return run.SetOutput([]string{g.Name})
	}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(ctx, greet{Name: "last"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, res.ID)
	if err != nil || st.State != cmdq.StateCompleted || st.Output != `["last"]` {
		t.Fatalf("%+v %v, want completed with output [\"last\"]", st, err)
	}
	if err := <-errs; !errors.Is(err, cmdq.ErrInvalidOutput) {
		t.Errorf("SetOutput(func): %v, want ErrInvalidOutput", err)
	}
}
