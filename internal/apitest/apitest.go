// Package apitest starts a real cmdq server for this module's tests: an
// httptest.Server running the JSON API (api.New) and, at /ui/, the console
// (console.New) on one cmdq.Client over a real store (by default a fresh
// embedded store in the test's temporary directory), mounted as `cmdq
// serve` mounts them (one token list, one failed-authentication limiter).
// Other packages' tests (client, cmd) reuse it. Its Log writes commands
// directly (poison entries, events), for tests of what the API and the
// console show.
package apitest

import (
	"cmp"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/console"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/metrics"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// Test tokens, one per role, plus one with every role. They pass
// api.MinTokenLength.
const (
	IssuerToken   = "issuer-token-0123456789"
	ReaderToken   = "reader-token-0123456789"
	OperatorToken = "operator-token-0123456789"
	AllToken      = "all-roles-token-0123456789"
)

// Tokens returns the test tokens and their roles.
func Tokens() api.Tokens {
	return api.Tokens{
		IssuerToken:   {api.RoleIssuer},
		ReaderToken:   {api.RoleReader},
		OperatorToken: {api.RoleOperator},
		AllToken:      {api.RoleIssuer, api.RoleReader, api.RoleOperator},
	}
}

// Options configures Start. The zero value gives an unauthenticated server on
// a fresh embedded store.
type Options struct {
	// Store is the storage (default: embedded store in t.TempDir, closed at cleanup).
	Store storage.Store
	// Prefix is the storage name prefix (default "cmdq").
	Prefix string
	// Config is the client's configuration (its Prefix is Prefix). Zero
	// poll intervals default to 10 ms and 1 s, and the reconciler is off
	// unless ReconcileInterval is set.
	Config cmdq.Config
	// Setup, when set, registers or declares command types (and periodic
	// schedules) on the client before the server starts; with handlers or
	// schedules registered, the client's processor and scheduler run until
	// the test ends, unless Idle.
	Setup func(c *cmdq.Client) error
	// Idle keeps the client's processor stopped although handlers are
	// registered: the server knows the types (their checks, their retry
	// policy) but nothing processes them.
	Idle bool
	// Tokens as in api.Config and console.Config (default nil: no auth).
	// Use Tokens() for the test set.
	Tokens api.Tokens
	// Health as in api.Config and console.Config (default: the client's).
	Health api.HealthFunc
	// MaxBodyBytes as in api.Config (default 1 MiB).
	MaxBodyBytes int64
	// CORSOrigins as in api.Config (default none).
	CORSOrigins []string
	// AllowedHosts as in api.Config and console.Config (default none).
	AllowedHosts []string
	// AuthFailureBurst as in api.Config (default 10; negative: never
	// refuse): one limiter counts the failures at the API and the
	// console.
	AuthFailureBurst int
	// Logger as in api.Config and console.Config (default: discard).
	Logger zerolog.Logger
	// API, when set, adjusts the api.Config before the handler is built
	// (request deadlines, long-poll and stream settings, …).
	API func(*api.Config)
	// Console, when set, adjusts the console.Config before its handler is
	// built (BasePath, MaxStream, …).
	Console func(*console.Config)
	// HTTP, when set, adjusts the http.Server before it starts (its read
	// and write timeouts, …).
	HTTP func(*http.Server)
}

// Server is a running test API server.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:port).
	URL string
	// HTTP is the underlying test server, closed at cleanup.
	HTTP *httptest.Server
	// Store is the (instrumented) store the client uses.
	Store storage.Store
	// Client is what the API runs on.
	Client *cmdq.Client
	// Log writes the client's commands directly, as another process would
	// (tests set up poison entries and events through it).
	Log Log
	// Metrics and Prom are the server's metrics and their private registry.
	Metrics *metrics.Metrics
	Prom    *prometheus.Registry
}

// Start starts a server; it is closed when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	raw := opts.Store
	if raw == nil {
		st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
		if err != nil {
			t.Fatalf("apitest: open embedded store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		raw = st
	}
	prom := prometheus.NewRegistry()
	m, err := metrics.New(prom)
	if err != nil {
		t.Fatalf("apitest: metrics: %v", err)
	}
	st := m.InstrumentStore(raw)
	cfg := opts.Config
	cfg.Prefix = cmp.Or(opts.Prefix, cfg.Prefix)
	cfg.MinPollInterval = cmp.Or(cfg.MinPollInterval, 10*time.Millisecond)
	cfg.MaxPollInterval = cmp.Or(cfg.MaxPollInterval, time.Second)
	cfg.ReconcileInterval = cmp.Or(cfg.ReconcileInterval, cmdq.NoReconcile)
	cfg.Observers = append(cfg.Observers, m)
	c, err := cmdq.New(st, cfg)
	if err != nil {
		t.Fatalf("apitest: client: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) }) // before the store closes
	if opts.Setup != nil {
		if err := opts.Setup(c); err != nil {
			t.Fatalf("apitest: setup: %v", err)
		}
	}
	if (c.Handles() || len(c.PeriodicNames()) > 0) && !opts.Idle {
		if err := c.Start(context.Background()); err != nil {
			t.Fatalf("apitest: start: %v", err)
		}
	}
	log := testenv.OpenLog(t, st, c.Prefix())
	limiter := api.NewAuthLimiter(opts.AuthFailureBurst, opts.Logger)
	acfg := api.Config{
		Client: c, Health: opts.Health, Tokens: opts.Tokens,
		MaxBodyBytes: opts.MaxBodyBytes, Metrics: m, Gatherer: prom, CORSOrigins: opts.CORSOrigins,
		AllowedHosts: opts.AllowedHosts, AuthLimiter: limiter, Logger: opts.Logger,
	}
	if opts.API != nil {
		opts.API(&acfg)
	}
	h, err := api.New(acfg)
	if err != nil {
		t.Fatalf("apitest: api.New: %v", err)
	}
	ccfg := console.Config{
		Client: c, Health: opts.Health, Tokens: opts.Tokens, AllowedHosts: opts.AllowedHosts,
		AuthLimiter: limiter, Logger: opts.Logger, BasePath: acfg.BasePath, RequestTimeout: acfg.RequestTimeout,
	}
	if opts.Console != nil {
		opts.Console(&ccfg)
	}
	ui, err := console.New(ccfg)
	if err != nil {
		t.Fatalf("apitest: console.New: %v", err)
	}
	hs := httptest.NewUnstartedServer(console.Beside(h, ui))
	if opts.HTTP != nil {
		opts.HTTP(hs.Config)
	}
	hs.Start()
	t.Cleanup(hs.Close)
	return &Server{URL: hs.URL, HTTP: hs, Store: st, Client: c, Log: Log{log}, Metrics: m, Prom: prom}
}

// Poison moves command id to the poison table the way a processor does
// (a poisoned event, projection poisoned, poison entry).
func (s *Server) Poison(t testing.TB, id, reason, lastError string) {
	t.Helper()
	s.Log.Poison(t, id, cmdq.PoisonEntry{DequeueCount: 5, Reason: reason, LastError: lastError, Worker: "apitest"})
}

// QueueCount returns the approximate number of messages on logical queue
// name ("" = "commands").
func (s *Server) QueueCount(t testing.TB, name string) int {
	t.Helper()
	n, err := s.Client.QueueDepth(context.Background(), cmp.Or(name, cmdq.DefaultQueue))
	if err != nil {
		t.Fatalf("apitest: queue depth: %v", err)
	}
	return n
}

// StorageOps sums cmdq_storage_operations_total for op.
func StorageOps(t testing.TB, g prometheus.Gatherer, op string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != "cmdq_storage_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					v += m.GetCounter().GetValue()
				}
			}
		}
	}
	return v
}

// Log records events and poison entries directly, as a processor in
// another process would (testenv.Log), given as cmdq's types.
type Log struct{ *testenv.Log }

// Append appends events to command id (one point read, one batch).
func (l Log) Append(t testing.TB, id string, events ...cmdq.Event) {
	t.Helper()
	l.Log.Append(t, id, ModelEvents(events)...)
}

// Poison moves command id to the poison table with entry e, after events.
func (l Log) Poison(t testing.TB, id string, e cmdq.PoisonEntry, events ...cmdq.Event) {
	t.Helper()
	l.Log.Poison(t, id, model.PoisonEntry(e), ModelEvents(events)...)
}

// PoisonMessage records a poison entry without a stored command (a
// malformed message).
func (l Log) PoisonMessage(t testing.TB, e cmdq.PoisonEntry) {
	t.Helper()
	l.Log.PoisonMessage(t, model.PoisonEntry(e))
}

// ModelEvents returns events as the engine's.
func ModelEvents(events []cmdq.Event) []model.Event {
	out := make([]model.Event, len(events))
	for i, e := range events {
		out[i] = model.Event{Seq: e.Seq, Kind: model.EventKind(e.Kind), Time: e.Time, Attempt: e.Attempt, Worker: e.Worker,
			By: e.By, Step: e.Step, Note: e.Note, Error: e.Error, Reason: e.Reason, Detail: e.Detail,
			MessageID: e.MessageID, RunAt: e.RunAt}
	}
	return out
}
