// Package apitest starts a real cmdq API server for tests: an httptest.Server
// running api.New on an Issuer and Reader over a real store (by default a
// fresh embedded store in the test's temporary directory). Other packages'
// tests (client, cmd) reuse it.
package apitest

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/commands"
	"github.com/cmdq-dev/cmdq/handlers"
	"github.com/cmdq-dev/cmdq/status"
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
	// Tokens as in api.Config (default nil: no auth). Use Tokens() for the test set.
	Tokens api.Tokens
	// Registry as in api.Config (default nil).
	Registry *handlers.Registry
	// Health as in api.Config (default nil: healthy).
	Health api.HealthFunc
	// MaxBodyBytes as in api.Config (default 1 MiB).
	MaxBodyBytes int64
	// Notify as in commands.Options (default nil).
	Notify func(queue string)
	// QueueFor as in commands.Options (default: everything to "commands").
	QueueFor func(cmdType string) string
	// CORSOrigins as in api.Config (default none).
	CORSOrigins []string
	// AllowedHosts as in api.Config (default none).
	AllowedHosts []string
	// AuthFailureBurst as in api.Config (default 10; negative: never refuse).
	AuthFailureBurst int
	// Logger as in api.Config (default: discard).
	Logger zerolog.Logger
}

// Server is a running test API server.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:port).
	URL string
	// HTTP is the underlying test server, closed at cleanup.
	HTTP *httptest.Server
	// Store is the (instrumented) store the Issuer and Reader use.
	Store storage.Store
	// Names are the storage names.
	Names status.Names
	// Issuer, Reader and Registry are what the API runs on.
	Issuer   *commands.Issuer
	Reader   *status.Reader
	Registry *handlers.Registry
	// Metrics and Prom are the server's metrics and their private registry.
	Metrics *api.Metrics
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
	m, err := api.NewMetrics(prom)
	if err != nil {
		t.Fatalf("apitest: metrics: %v", err)
	}
	st := m.InstrumentStore(raw)
	names := status.Names{Prefix: opts.Prefix}
	iss, err := commands.NewIssuer(st, commands.Options{Prefix: opts.Prefix, Notify: opts.Notify, QueueFor: opts.QueueFor})
	if err != nil {
		t.Fatalf("apitest: issuer: %v", err)
	}
	rd, err := status.OpenReader(context.Background(), st, names, status.Options{})
	if err != nil {
		t.Fatalf("apitest: reader: %v", err)
	}
	h, err := api.New(api.Config{
		Issuer: iss, Reader: rd, Registry: opts.Registry, Health: opts.Health, Tokens: opts.Tokens,
		MaxBodyBytes: opts.MaxBodyBytes, Metrics: m, Gatherer: prom, CORSOrigins: opts.CORSOrigins,
		AllowedHosts: opts.AllowedHosts, AuthFailureBurst: opts.AuthFailureBurst, Logger: opts.Logger,
	})
	if err != nil {
		t.Fatalf("apitest: api.New: %v", err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &Server{URL: hs.URL, HTTP: hs, Store: st, Names: names, Issuer: iss, Reader: rd, Registry: opts.Registry, Metrics: m, Prom: prom}
}

// Poison moves command id to the poison table the way a processor does
// (status.Store.Poison: poisoned event, projection poisoned, poison entry).
func (s *Server) Poison(t testing.TB, id, reason, lastError string) {
	t.Helper()
	ctx := context.Background()
	rec, err := s.Reader.Store().Load(ctx, id)
	if err != nil {
		t.Fatalf("apitest: load %s: %v", id, err)
	}
	if err := s.Reader.Store().Poison(ctx, rec, status.PoisonEntry{DequeueCount: 5, Reason: reason, LastError: lastError, Worker: "apitest"}); err != nil {
		t.Fatalf("apitest: poison %s: %v", id, err)
	}
}

// QueueCount returns the approximate number of messages on logical queue
// name ("" = "commands").
func (s *Server) QueueCount(t testing.TB, name string) int {
	t.Helper()
	q, err := s.Store.Queue(context.Background(), s.Names.Queue(name))
	if err != nil {
		t.Fatalf("apitest: queue: %v", err)
	}
	n, err := q.ApproximateCount(context.Background())
	if err != nil {
		t.Fatalf("apitest: count: %v", err)
	}
	return n
}
