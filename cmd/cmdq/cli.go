package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/jsonview"
	"github.com/cmdq-dev/cmdq/storage"
)

// defaultServer is the server the operator commands talk to when neither
// --server nor --store is given.
const defaultServer = "http://127.0.0.1:8080"

// backend is what the operator commands need: a cmdq server (HTTP) or a
// store opened directly.
type backend interface {
	Issue(ctx context.Context, r cmdq.Raw) (id string, existing bool, err error)
	Get(ctx context.Context, id string) (cmdq.Status, error)
	Events(ctx context.Context, id string) ([]cmdq.Event, error)
	// WaitSeen waits until the command is final, calling seen with each
	// status before (a long-poll on a server, a watch of the store).
	WaitSeen(ctx context.Context, id string, seen func(cmdq.Status)) (cmdq.Status, error)
	// Follow calls onEvent with the command's events after seq after as
	// they happen, until it is final, and returns the final status (an
	// event stream on a server, a watch of the store).
	Follow(ctx context.Context, id string, after int64, onEvent func(cmdq.Event)) (cmdq.Status, error)
	ListPoison(ctx context.Context, q cmdq.PoisonQuery) (cmdq.PoisonPage, error)
	// GetPoison returns a poison entry and its command's params (nil for
	// the entry of a malformed message).
	GetPoison(ctx context.Context, id string) (cmdq.PoisonEntry, json.RawMessage, error)
	Requeue(ctx context.Context, id string) error
	Discard(ctx context.Context, id string) error
	// Cancel, Queues, PauseQueue and ResumeQueue: control.go.
	Cancel(ctx context.Context, id string) (cmdq.CancelResult, error)
	// RunNow makes a scheduled or retrying command due now (schedule.go).
	RunNow(ctx context.Context, id string) (cmdq.Status, error)
	Queues(ctx context.Context) ([]cmdq.QueueInfo, error)
	PauseQueue(ctx context.Context, name string) (cmdq.QueueInfo, error)
	ResumeQueue(ctx context.Context, name string) (cmdq.QueueInfo, error)
	// Periodic: periodic.go.
	Periodic(ctx context.Context) ([]cmdq.PeriodicInfo, error)
	GetPeriodic(ctx context.Context, name string, ticks int) (cmdq.PeriodicInfo, error)
	TriggerPeriodic(ctx context.Context, name string, at time.Time) (cmdq.TickInfo, error)
	// ListCommands: ls.go.
	ListCommands(ctx context.Context, q cmdq.CommandQuery) (cmdq.CommandPage, error)
	Close() error
}

// cliError is an error as the CLI prints it: one sentence in the CLI's
// words (msg), wrapping the error it came from, so errors.Is still sees
// the sentinels (cmdq.ErrNotFound, client.ErrConflict, …).
type cliError struct {
	msg string
	err error
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// apiHints turns the API paths a server's problem detail points to into
// the CLI commands that do the same.
var apiHints = strings.NewReplacer(
	"GET /v1/poison lists the poisoned commands", "`cmdq poison ls` lists the poisoned commands",
	"GET /v1/commands/{id} shows its state", "`cmdq status ID` shows its state",
	"DELETE /v1/poison/{id}", "`cmdq poison rm ID`",
	"GET /v1/queues lists", "`cmdq queue ls` lists",
	"a POST /v1/commands with the same id is safe to repeat", "`cmdq send` with the same --id is safe to repeat",
	"GET /healthz shows the last fault", "the server's /healthz shows the last fault",
)

// problemText is what the CLI says about a server's problem: its detail,
// then the field problems it does not already say, API paths turned into
// CLI commands; no request line, no HTTP status.
func problemText(p client.Problem) string {
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	for _, f := range p.Errors {
		if f.Detail == "" || strings.Contains(msg, f.Detail) {
			continue
		}
		msg += "; " + strings.TrimPrefix(f.Pointer, "#/") + ": " + f.Detail
	}
	if p.Status == http.StatusUnauthorized {
		msg += "; give the CLI a token with --token or CMDQ_TOKEN"
	}
	return apiHints.Replace(msg)
}

// notFoundCommand and notFoundPoison are what both backends say about a
// command or poison entry that does not exist.
const (
	notFoundCommand = "no command with this ID; check the ID (IDs from another cmdq prefix or storage account are not visible here; final commands are removed after their retention: completed ones after 7 days, discarded ones after 30, by default)"
	notFoundPoison  = "no poison entry for this command ID; `cmdq poison ls` lists the poisoned commands"
)

// remoteFlags choose and reach the backend.
type remoteFlags struct {
	server string
	token  string
	store  storeFlags
	cmd    *cobra.Command
	// readOnly: the command only reads; a store is opened without
	// creating anything in it (readonly.go).
	readOnly bool
}

func (f *remoteFlags) add(c *cobra.Command) {
	f.cmd = c
	c.Flags().StringVar(&f.server, "server", "", "URL of a cmdq server (default "+defaultServer+" unless --store is given)")
	c.Flags().StringVar(&f.token, "token", "", "bearer token for --server (default none)")
	f.store.add(c)
}

// open returns the backend: the server given by --server; else the store
// given by --store; else the default server.
func (f *remoteFlags) open(ctx context.Context) (backend, error) {
	fl := f.cmd.Flags()
	// --data names an embedded store: it implies --store embedded.
	direct := fl.Changed("store") || fl.Changed("data")
	if fl.Changed("server") && direct {
		return nil, &usageError{cmd: f.cmd, msg: "give --server (talk to a server) or --store/--data (open a store directly), not both (CMDQ_SERVER, CMDQ_STORE and CMDQ_DATA count as given)"}
	}
	if !direct {
		base := defaultServer
		if f.server != "" {
			var err error
			if base, err = serverURL(f.server); err != nil {
				return nil, &usageError{cmd: f.cmd, msg: err.Error()}
			}
		}
		var opts []client.Option
		if f.token != "" {
			opts = append(opts, client.WithToken(f.token))
		}
		c, err := client.New(base, opts...)
		if err != nil {
			return nil, fmt.Errorf("--server: %w", err)
		}
		return httpBackend{c: c, url: base}, nil
	}
	st, err := f.store.openMode(ctx, f.readOnly)
	if err != nil {
		return nil, err
	}
	shards, err := f.store.shardMap()
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	c, err := cmdq.New(st, cmdq.Config{Prefix: f.store.prefix, Shards: shards, Doorbell: cmdq.Doorbell{Secret: f.store.secret()}})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return &storeBackend{st: st, c: c, by: operatorName()}, nil
}

// serverURL reads --server: a base URL, or a bare host:port (http is
// assumed). The console's address (…/ui/) is refused with the base URL
// to give instead.
func serverURL(s string) (string, error) {
	raw := strings.TrimSpace(s)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--server %q: give the server's base URL, such as %s, or its host:port", s, defaultServer)
	}
	path := strings.TrimSuffix(u.Path, "/")
	if path == "/ui" || strings.HasSuffix(path, "/ui") || strings.Contains(path, "/ui/") {
		base := *u
		base.Path = path[:strings.Index(path+"/", "/ui/")]
		return "", fmt.Errorf("--server %q is the console's address; give the server's base URL, such as %s", s, base.String())
	}
	u.Path = path
	return u.String(), nil
}

// operatorName names the CLI user in requeued and discarded events.
func operatorName() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "cli:" + name + "@" + host
}

type httpBackend struct {
	c   *client.Remote
	url string // the server's base URL
}

// wrap makes the client's errors read well after "cmdq: <what>: ": a
// server's problem is its detail in the CLI's words (problemText), a
// refused connection says what to check (once), other transport errors
// name the request once.
func (b httpBackend) wrap(err error) error {
	if err == nil {
		return nil
	}
	var ce *client.Error
	if errors.As(err, &ce) && ce.Problem.Type == "" {
		// Not a problem document: not the cmdq API answering (a proxy,
		// the console, another web server). Its body is no message.
		return &cliError{msg: fmt.Sprintf("%s answered %d %s, not as the cmdq API does: is it a cmdq server's base URL (such as %s)? Give that with --server or CMDQ_SERVER",
			b.url, ce.Status, http.StatusText(ce.Status), defaultServer), err: err}
	}
	if errors.As(err, &ce) {
		return &cliError{msg: problemText(ce.Problem), err: err}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &cliError{msg: fmt.Sprintf("%s answered with something that is not JSON, not as the cmdq API does: is it a cmdq server's base URL (such as %s)? Give that with --server or CMDQ_SERVER", b.url, defaultServer), err: err}
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &cliError{msg: fmt.Sprintf("cannot reach %s (connection refused): is `cmdq serve` running there? Start it, or point to another server with --server URL or CMDQ_SERVER", b.url), err: err}
	}
	return fmt.Errorf("%s %s: %w", strings.ToUpper(ue.Op), ue.URL, ue.Err)
}

func (b httpBackend) Issue(ctx context.Context, r cmdq.Raw) (string, bool, error) {
	var opts []client.IssueOption
	switch {
	case !r.RunAt.IsZero():
		opts = append(opts, client.At(r.RunAt))
	case r.Delay != 0:
		opts = append(opts, client.After(r.Delay))
	}
	req := client.IssueRequest{Type: r.Type, Params: r.Params, ID: r.ID, CorrelationID: r.CorrelationID, UniqueKey: r.UniqueKey, OrderKey: r.OrderKey}
	if r.UniqueKey != "" || r.UniqueWindow != 0 {
		req.UniqueWindow = r.UniqueWindow.String()
	}
	res, err := b.c.Issue(ctx, req, opts...)
	return res.ID, res.Existing, b.wrap(err)
}

func (b httpBackend) Get(ctx context.Context, id string) (cmdq.Status, error) {
	s, err := b.c.Get(ctx, id)
	return s, b.wrap(err)
}

func (b httpBackend) Events(ctx context.Context, id string) ([]cmdq.Event, error) {
	e, err := b.c.Events(ctx, id)
	return e, b.wrap(err)
}

func (b httpBackend) WaitSeen(ctx context.Context, id string, seen func(cmdq.Status)) (cmdq.Status, error) {
	st, err := b.c.WaitSeen(ctx, id, seen)
	return st, b.wrap(err)
}

func (b httpBackend) Follow(ctx context.Context, id string, after int64, onEvent func(cmdq.Event)) (cmdq.Status, error) {
	st, err := b.c.Follow(ctx, id, after, onEvent, nil)
	return st, b.wrap(err)
}

func (b httpBackend) ListPoison(ctx context.Context, q cmdq.PoisonQuery) (cmdq.PoisonPage, error) {
	p, err := b.c.ListPoison(ctx, q)
	return p, b.wrap(err)
}

func (b httpBackend) GetPoison(ctx context.Context, id string) (cmdq.PoisonEntry, json.RawMessage, error) {
	p, err := b.c.GetPoisonParams(ctx, id)
	return p.PoisonEntry, p.Params, b.wrap(err)
}

func (b httpBackend) Requeue(ctx context.Context, id string) error {
	return b.wrap(b.c.Requeue(ctx, id))
}

func (b httpBackend) Discard(ctx context.Context, id string) error {
	return b.wrap(b.c.Discard(ctx, id))
}

func (httpBackend) Close() error { return nil }

type storeBackend struct {
	st storage.Store
	c  *cmdq.Client
	by string
}

// wrapStore says a store's errors about a command in the words the
// server's answers have (notFoundCommand).
func wrapStore(err error) error {
	if errors.Is(err, cmdq.ErrExpired) {
		return err // it says when the command was issued and its retention
	}
	if errors.Is(err, cmdq.ErrNotFound) || errors.Is(err, storage.ErrNotFound) {
		return &cliError{msg: notFoundCommand, err: err}
	}
	return err
}

// wrapStorePoison is wrapStore for a poison entry.
func wrapStorePoison(err error) error {
	if errors.Is(err, cmdq.ErrExpired) {
		return err
	}
	if errors.Is(err, cmdq.ErrNotFound) || errors.Is(err, storage.ErrNotFound) {
		return &cliError{msg: notFoundPoison, err: err}
	}
	return err
}

func (b *storeBackend) Issue(ctx context.Context, r cmdq.Raw) (string, bool, error) {
	res, err := b.c.IssueRaw(ctx, r)
	return res.ID, res.Existing, err
}

func (b *storeBackend) Get(ctx context.Context, id string) (cmdq.Status, error) {
	if err := cmdq.ValidateID(id); err != nil {
		return cmdq.Status{}, err
	}
	s, err := b.c.Get(ctx, id)
	return s, wrapStore(err)
}

func (b *storeBackend) Events(ctx context.Context, id string) ([]cmdq.Event, error) {
	if err := cmdq.ValidateID(id); err != nil {
		return nil, err
	}
	e, err := b.c.Events(ctx, id)
	return e, wrapStore(err)
}

func (b *storeBackend) WaitSeen(ctx context.Context, id string, seen func(cmdq.Status)) (cmdq.Status, error) {
	if err := cmdq.ValidateID(id); err != nil {
		return cmdq.Status{}, err
	}
	w := b.c.Watch(id)
	defer w.Close()
	for {
		st, _, changed, err := w.Current(ctx)
		switch {
		case err != nil:
			return st, wrapStore(err)
		case st.State.Final():
			return st, nil
		}
		seen(st)
		select {
		case <-changed:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

func (b *storeBackend) Follow(ctx context.Context, id string, after int64, onEvent func(cmdq.Event)) (cmdq.Status, error) {
	if err := cmdq.ValidateID(id); err != nil {
		return cmdq.Status{}, err
	}
	w := b.c.Watch(id)
	defer w.Close()
	tag := ""
	for {
		st, next, changed, err := w.Current(ctx)
		if err != nil {
			return st, wrapStore(err)
		}
		if next != tag {
			evs, err := w.Events(ctx, after)
			if err != nil {
				return st, wrapStore(err)
			}
			for _, e := range evs {
				onEvent(e)
				after = e.Seq
			}
			tag = next
		}
		if st.State.Final() {
			return st, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

func (b *storeBackend) ListPoison(ctx context.Context, q cmdq.PoisonQuery) (cmdq.PoisonPage, error) {
	p, err := b.c.ListPoison(ctx, q)
	if errors.Is(err, storage.ErrNotFound) {
		// Opened read-only, the poison table does not exist until a
		// command is poisoned.
		return cmdq.PoisonPage{Entries: []cmdq.PoisonEntry{}}, nil
	}
	return p, err
}

func (b *storeBackend) GetPoison(ctx context.Context, id string) (cmdq.PoisonEntry, json.RawMessage, error) {
	p, err := b.c.GetPoison(ctx, id)
	if err != nil {
		return p, nil, wrapStorePoison(err)
	}
	if cmdq.ValidateID(id) != nil {
		return p, nil, nil // a malformed message's entry: no stored command
	}
	_, params, err := b.c.GetParams(ctx, id)
	if err != nil && !errors.Is(err, cmdq.ErrNotFound) {
		return p, nil, err
	}
	return p, params, nil
}

func (b *storeBackend) Requeue(ctx context.Context, id string) error {
	return wrapStorePoison(b.c.Requeue(ctx, id, b.by))
}

func (b *storeBackend) Discard(ctx context.Context, id string) error {
	return wrapStorePoison(b.c.Discard(ctx, id, b.by))
}

func (b *storeBackend) Close() error {
	_ = b.c.Stop(context.Background()) // its background enqueue retries, before the store closes
	return b.st.Close()
}

// withBackend opens the backend, runs fn and closes it.
func (f *remoteFlags) withBackend(ctx context.Context, fn func(b backend) error) error {
	b, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(b)
}

const remoteHelp = `
It talks to a cmdq server (--server URL or host:port, --token) or opens a
store directly (--data DIR, which implies --store embedded, or --store
azure). With neither, it uses the server at ` + defaultServer + `. The
embedded store belongs to one process: while ` + "`cmdq serve`" + ` holds it, use
--server.`

func newSendCmd() *cobra.Command {
	var (
		f       remoteFlags
		params  string
		id      string
		corr    string
		wait    bool
		asJSON  bool
		timeout time.Duration
		at      string
		in      time.Duration

		unique       string
		orderKey     string
		uniqueWindow time.Duration
	)
	c := &cobra.Command{
		Use:   "send TYPE",
		Short: "Issue a command and print its ID (--wait: wait until it ends; --at/--in: schedule it)",
		Long: `send issues a command of type TYPE with JSON params and prints its ID on
stdout. With --wait it then waits until the command is completed, poisoned,
discarded or cancelled, and prints the final status and the command's output
(a line "output {...}", when its handler recorded one); it exits 1 unless the
command completed. --json prints JSON instead: {"id","existing"}, or with
--wait the final status with the output. While it waits it says on stderr why the command has not started
("cmdq: waiting: …": its queue is paused, no processor polls it, it is
scheduled or retrying; a free slot or a processor's next poll after 2 s).
Ctrl-C ends the wait, not the command: it exits 130 and says how
to follow the command.

With --at TIME (RFC 3339, such as 2026-05-01T09:00:00Z) or --in DURATION
(such as 90s or 2h30m) the command is scheduled: its status is scheduled
until then and it does not start before; at most 2 years ahead.

Examples:
  cmdq send demo.echo --params '{"hello":"world"}' --wait
  cmdq send demo.fail --params '{"times":2}' --wait
  cmdq send demo.echo --params '{"order":42}' --unique order-42 --unique-window 1h
  cmdq send demo.echo --in 90s
  cmdq send demo.echo --at 2026-05-01T09:00:00Z
` + remoteHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			if !json.Valid([]byte(params)) {
				return fmt.Errorf("--params %q is not valid JSON; pass an object such as '{\"ms\":500}'", params)
			}
			raw := cmdq.Raw{ID: cmdq.NormalizeID(id), Type: args[0], Params: json.RawMessage(params), CorrelationID: corr}
			if err := scheduleFlags(cmd, at, in, &raw); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			return f.withBackend(ctx, func(b backend) error {
				if (unique != "") != (uniqueWindow != 0) {
					return errors.New("--unique and --unique-window go together: --unique KEY --unique-window 1h (issuing the same type and KEY again within the window returns the first command)")
				}
				raw.UniqueKey, raw.UniqueWindow = unique, uniqueWindow
				if cmd.Flags().Changed("order-key") && orderKey == "" {
					return errors.New("--order-key is empty: give the key of the commands this one is ordered with (an aggregate's ID, say), or leave the flag out")
				}
				raw.OrderKey = orderKey
				gotID, existing, err := b.Issue(ctx, raw)
				if err != nil {
					return fmt.Errorf("send %s: %w", args[0], err)
				}
				if !asJSON {
					fmt.Fprintln(out, term(gotID))
				}
				switch {
				case existing && unique != "":
					fmt.Fprintf(cmd.ErrOrStderr(), "cmdq: duplicate: a %s command with unique key %s already exists in this %s window; nothing new was issued\n", term(args[0]), term(unique), uniqueWindow)
				case existing:
					fmt.Fprintln(cmd.ErrOrStderr(), "cmdq: a command with this ID and params already existed; nothing new was issued")
				}
				if !wait {
					if asJSON {
						return writeJSON(out, struct {
							ID       string `json:"id"`
							Existing bool   `json:"existing"`
						}{gotID, existing})
					}
					return nil
				}
				pr := newProgress(cmd.ErrOrStderr())
				notes := &waitNotes{w: cmd.ErrOrStderr(), pr: pr}
				st, err := b.WaitSeen(ctx, gotID, func(st cmdq.Status) {
					pr.update(st)
					notes.update(st)
				})
				notes.stop()
				pr.clear()
				if err != nil && errors.Is(ctx.Err(), context.Canceled) {
					// Ctrl-C (or SIGTERM): only the wait ends.
					return &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted: command %s goes on (it is stored and queued; stopping the wait does not stop it); follow it with `cmdq status %s --watch`, or stop it with `cmdq cancel %s`",
						term(gotID), term(gotID), term(gotID))}
				}
				if err != nil && ctx.Err() != nil {
					err = fmt.Errorf("waiting for %s (still %s): %w", gotID, st.State, ctx.Err())
				} else if err != nil {
					err = fmt.Errorf("status of %s: %w", gotID, err)
				}
				if err != nil {
					return err
				}
				if asJSON {
					if err := writeJSON(out, st); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(out, finalLine(paletteOf(out), st))
					if st.Output != "" {
						fmt.Fprintf(out, "output %s\n", term(outputText(st.Output)))
					}
				}
				if st.State != cmdq.StateCompleted {
					msg := fmt.Sprintf("command %s ended %s", term(st.ID), term(string(st.State)))
					if st.LastError != "" {
						msg += ": " + term(st.LastError)
					}
					return &exitError{code: 1, err: errors.New(msg + "; `cmdq status " + term(st.ID) + "` shows its events")}
				}
				return nil
			})
		},
	}
	f.add(c)
	c.Flags().StringVar(&params, "params", "{}", "command parameters, a JSON object")
	c.Flags().StringVar(&id, "id", "", "command ID, a UUID (upper case is read as lower case; default: a new one); sending the same ID, params and correlation ID again returns the existing command")
	c.Flags().StringVar(&corr, "correlation-id", "", "correlation ID carried with the command (default none)")
	c.Flags().StringVar(&orderKey, "order-key", "", "order key: the commands sent with the same key run one at a time, in the order they were sent, whatever their types, across every process (default none)")
	c.Flags().StringVar(&unique, "unique", "", "unique key: sending the same type and key again within --unique-window returns the first command (whatever the params) instead of a second one (default none)")
	c.Flags().DurationVar(&uniqueWindow, "unique-window", 0, "the unique key's window, 1s to 720h: a bucket of the UTC time truncated to a multiple of it (1h: from the hour)")
	c.Flags().BoolVar(&wait, "wait", false, "wait until the command is completed, poisoned, discarded or cancelled (a long-poll of the server), then print its final state and its output")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of the ID: {\"id\",\"existing\"}, or with --wait the final status (with the output)")
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0 = no limit)")
	c.Flags().StringVar(&at, "at", "", "schedule the command at this time, RFC 3339 (such as 2026-05-01T09:00:00Z; default: now)")
	c.Flags().DurationVar(&in, "in", 0, "schedule the command this long from now (such as 90s or 2h30m; default: now)")
	return c
}

// exitInterrupted is the exit status of a wait ended by Ctrl-C (128 +
// SIGINT, as shells report it).
const exitInterrupted = 130

// finalLine is the last line of `send --wait` and `status --watch`: the ID,
// the state and the attempts (and the last step, for commands with steps).
func finalLine(p palette, st cmdq.Status) string {
	return fmt.Sprintf("%s %s (%s)", term(st.ID), p.state(string(st.State), term(string(st.State))), attemptsText(st))
}

// attemptsText is "attempts N", " (K deferred)" when the handler deferred
// some (RetryAfter: they do not count toward the poison ceiling) and, once
// a step is done, ", step M".
func attemptsText(st cmdq.Status) string {
	s := fmt.Sprintf("attempts %d", st.Attempts)
	if st.Deferrals > 0 {
		s += fmt.Sprintf(" (%d deferred)", st.Deferrals)
	}
	if st.Step > 0 {
		s += fmt.Sprintf(", step %d", st.Step)
	}
	return s
}

func newStatusCmd() *cobra.Command {
	var (
		f      remoteFlags
		watch  bool
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "status ID",
		Short: "Show a command's status and its events as a timeline (--watch: follow it)",
		Long: `status prints a command's current status and its lifecycle events, oldest
first. A command that has not started says why it waits: scheduled until a
time, retrying at a time, its queue paused (by whom, since when), no
processor polling its queue, every processor of its queue busy, or due (a
processor takes it at its next poll). With --watch it keeps printing new
events until the command is completed, poisoned, discarded or cancelled.
` + remoteHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := cmdq.NormalizeID(args[0])
			out := cmd.OutOrStdout()
			return f.withBackend(ctx, func(b backend) error {
				st, err := b.Get(ctx, id)
				if err != nil {
					return fmt.Errorf("status of %s: %w", id, err)
				}
				evs, err := b.Events(ctx, id)
				if err != nil {
					return fmt.Errorf("events of %s: %w", id, err)
				}
				if asJSON {
					return writeJSON(out, struct {
						cmdq.Status
						Events []cmdq.Event `json:"events"`
					}{st, evs})
				}
				printStatus(out, st)
				fmt.Fprintln(out)
				var last int64
				last = printEvents(out, evs, last)
				if !watch {
					return nil
				}
				if !st.State.Final() {
					st, err = b.Follow(ctx, id, last, func(e cmdq.Event) { last = printEvents(out, []cmdq.Event{e}, last) })
					if ctx.Err() != nil {
						return nil
					}
					if err != nil {
						return fmt.Errorf("follow %s: %w", id, err)
					}
				}
				fmt.Fprintf(out, "\n%s\n", finalLine(paletteOf(out), st))
				return nil
			})
		},
	}
	f.add(c)
	f.readOnly = true
	c.Flags().BoolVar(&watch, "watch", false, "keep printing new events as they happen (an event stream from the server) until the command is completed, poisoned, discarded or cancelled")
	c.Flags().BoolVar(&asJSON, "json", false, "print the status and events as JSON")
	return c
}

// timeLayout is how the CLI prints times: UTC with milliseconds and a Z,
// as the operator page and the JSON API do.
const timeLayout = "2006-01-02 15:04:05.000Z"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

func printStatus(w io.Writer, st cmdq.Status) {
	p := paletteOf(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "command\t%s\n", term(st.ID))
	fmt.Fprintf(tw, "type\t%s\n", term(st.Type))
	fmt.Fprintf(tw, "status\t%s (%s)\n", p.state(string(st.State), term(string(st.State))), attemptsText(st))
	now := time.Now()
	switch {
	case st.Waiting != nil:
		fmt.Fprintf(tw, "waiting\t%s\n", waitingText(st, now))
	case st.State == cmdq.StateScheduled:
		// A server that does not say why a command waits (an older one).
		if line := dueLine(st, now); line != "" {
			fmt.Fprintf(tw, "due\t%s\n", line)
		}
	case st.State == cmdq.StatePending || st.State == cmdq.StateRetrying:
		fmt.Fprintf(tw, "note\t%s\n", takenNote)
	}
	if st.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", term(st.LastError))
	}
	fmt.Fprintf(tw, "created\t%s\n", fmtTime(st.CreatedAt))
	fmt.Fprintf(tw, "updated\t%s\n", fmtTime(st.UpdatedAt))
	if st.CorrelationID != "" {
		fmt.Fprintf(tw, "correlation\t%s\n", term(st.CorrelationID))
	}
	if st.OrderKey != "" {
		fmt.Fprintf(tw, "order key\t%s\n", term(st.OrderKey))
	}
	if st.TraceID != "" {
		fmt.Fprintf(tw, "trace\t%s\n", term(st.TraceID))
	}
	if st.Output != "" {
		fmt.Fprintf(tw, "output\t%s\n", term(outputText(st.Output)))
	}
	_ = tw.Flush()
}

// maxOutputShown bounds the output status prints (--json prints it all).
const maxOutputShown = 2048

// outputText is a recorded output as status prints it: its compact JSON,
// cut after maxOutputShown bytes with a note of its size.
func outputText(out cmdq.JSON) string {
	if len(out) <= maxOutputShown {
		return string(out)
	}
	cut := maxOutputShown
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes; --json prints it all)", out[:cut], len(out))
}

// printEvents prints the events with Seq > after and returns the last Seq printed.
func printEvents(w io.Writer, evs []cmdq.Event, after int64) int64 {
	for _, e := range evs {
		if e.Seq <= after {
			continue
		}
		after = e.Seq
		kind := fmt.Sprintf("%-14s", term(string(e.Kind)))
		fmt.Fprintf(w, "%s  %s  %s\n", fmtTime(e.Time), paletteOf(w).state(string(e.Kind), kind), eventDetail(e))
	}
	return after
}

// eventDetail is the readable rest of a timeline line.
func eventDetail(e cmdq.Event) string {
	var parts []string
	if e.Attempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt %d", e.Attempt))
	}
	if e.Step > 0 {
		parts = append(parts, fmt.Sprintf("step %d", e.Step))
	}
	if !e.RunAt.IsZero() {
		parts = append(parts, "due "+fmtTime(e.RunAt))
	}
	if e.Note != "" {
		parts = append(parts, fmt.Sprintf("%q", e.Note))
	}
	if e.Reason != "" {
		parts = append(parts, "reason: "+term(e.Reason))
	}
	if e.Error != "" {
		parts = append(parts, "error: "+term(e.Error))
	}
	if e.Worker != "" {
		parts = append(parts, "by "+term(e.Worker))
	}
	if e.By != "" {
		parts = append(parts, "by "+term(e.By))
	}
	return strings.Join(parts, "  ")
}

func newPoisonCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "poison",
		Short: "List, inspect, requeue or remove poisoned commands",
		Long: `poison handles commands that were moved to the poison table (they failed on
every attempt up to their poison ceiling, failed permanently, or could not be
decoded). Entries stay until an operator requeues or removes them.
` + remoteHelp,
	}
	c.AddCommand(newPoisonLsCmd(), newPoisonShowCmd(), newPoisonActionCmd("requeue"), newPoisonActionCmd("rm"))
	return c
}

func newPoisonLsCmd() *cobra.Command {
	var (
		f      remoteFlags
		q      cmdq.PoisonQuery
		asJSON bool
		wide   bool
	)
	c := &cobra.Command{
		Use:   "ls",
		Short: "List poisoned commands, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			return f.withBackend(ctx, func(b backend) error {
				page, err := b.ListPoison(ctx, q)
				if err != nil {
					return fmt.Errorf("list poison: %w", err)
				}
				if asJSON {
					return writeJSON(out, page)
				}
				if len(page.Entries) == 0 {
					fmt.Fprintln(out, "no poisoned commands")
					return nil
				}
				rows := [][]string{{"COMMAND", "TYPE", "DEQUEUES", "POISONED AT", "REASON", "LAST ERROR"}}
				for _, e := range page.Entries {
					typ, reason := oneLine(term(e.Type), 32), oneLine(term(e.Reason), 32)
					if wide {
						typ, reason = term(e.Type), oneLine(term(e.Reason), 1<<20)
					}
					rows = append(rows, []string{term(e.CommandID), typ, strconv.FormatInt(e.DequeueCount, 10),
						fmtTime(e.PoisonedAt), reason, oneLine(term(e.LastError), 1<<20)})
				}
				// On a narrow terminal the dequeue count, then the time,
				// then the reason make room for the last error.
				table(out, rows, columns(out), wide, []int{2, 3, 4}, 30)
				if page.Continuation != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "more entries: add --continuation %s\n", shellQuote(term(page.Continuation)))
				}
				return nil
			})
		},
	}
	f.add(c)
	f.readOnly = true
	c.Flags().StringVar(&q.Type, "type", "", "only entries of this command type (default all)")
	c.Flags().IntVar(&q.Limit, "limit", cmdq.DefaultPoisonLimit, "most entries to list (at most 1000)")
	c.Flags().StringVar(&q.Continuation, "continuation", "", "continue a previous listing from its token")
	c.Flags().BoolVar(&asJSON, "json", false, "print the page as JSON")
	c.Flags().BoolVar(&wide, "wide", false, "print every column whole on a terminal too (the last error is otherwise shortened to fit its width, or COLUMNS; through a pipe rows are whole)")
	return c
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

func newPoisonShowCmd() *cobra.Command {
	var (
		f      remoteFlags
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "show ID",
		Short: "Show one poison entry (--json for machines)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			return f.withBackend(ctx, func(b backend) error {
				id := cmdq.NormalizeID(args[0])
				p, params, err := b.GetPoison(ctx, id)
				if err != nil {
					return fmt.Errorf("poison entry %s: %w", id, err)
				}
				if asJSON {
					return writeJSON(out, client.PoisonEntryResponse{PoisonEntry: p, Params: params})
				}
				printPoison(out, p, params)
				return nil
			})
		},
	}
	f.add(c)
	f.readOnly = true
	c.Flags().BoolVar(&asJSON, "json", false, "print the entry as JSON")
	return c
}

// maxParamsPrinted is how many bytes of laid-out params poison show
// prints (--json prints them whole).
const maxParamsPrinted = 4096

// printPoison prints one poison entry as labelled lines, its command's
// params (laid out, bounded), and what to do next.
func printPoison(w io.Writer, p cmdq.PoisonEntry, params json.RawMessage) {
	pal := paletteOf(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "command\t%s\n", term(p.CommandID))
	fmt.Fprintf(tw, "type\t%s\n", term(p.Type))
	fmt.Fprintf(tw, "status\t%s (dequeued %d times)\n", pal.state(string(cmdq.StatePoisoned), "poisoned"), p.DequeueCount)
	fmt.Fprintf(tw, "reason\t%s\n", term(p.Reason))
	if p.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", term(p.LastError))
	}
	fmt.Fprintf(tw, "poisoned at\t%s\n", fmtTime(p.PoisonedAt))
	fmt.Fprintf(tw, "queue\t%s\n", term(p.Queue))
	if p.Worker != "" {
		fmt.Fprintf(tw, "worker\t%s\n", term(p.Worker))
	}
	_ = tw.Flush()
	id := term(p.CommandID)
	if len(params) > 0 {
		laid, cutShort := jsonview.Indent(params, maxParamsPrinted, jsonview.DefaultMaxDepth)
		head := "params"
		if cutShort {
			head = fmt.Sprintf("params (the first %d of %d bytes; `cmdq poison show %s --json` prints them whole)", len(laid), len(params), id)
		}
		fmt.Fprintf(w, "\n%s\n", head)
		for _, line := range strings.Split(laid, "\n") {
			// Each line escaped: params are an issuer's text.
			fmt.Fprintf(w, "  %s\n", term(line))
		}
	}
	fmt.Fprintf(w, "\nnext: cmdq status %s (its events) · cmdq poison requeue %s · cmdq poison rm %s\n", id, id, id)
}

func newPoisonActionCmd(action string) *cobra.Command {
	var f remoteFlags
	short, done := "Put poisoned commands back on their queue (they run again from attempt 1)", "requeued"
	if action == "rm" {
		short, done = "Discard poisoned commands (a discarded event is recorded; the entry is removed)", "discarded"
	}
	c := &cobra.Command{
		Use:   action + " ID...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return f.withBackend(ctx, func(b backend) error {
				var errs []error
				for _, id := range args {
					id = cmdq.NormalizeID(id)
					var err error
					if action == "rm" {
						err = b.Discard(ctx, id)
					} else {
						err = b.Requeue(ctx, id)
					}
					if err != nil {
						errs = append(errs, fmt.Errorf("%s %s: %w", action, id, err))
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", term(id), done)
				}
				return errors.Join(errs...)
			})
		},
	}
	f.add(c)
	return c
}
