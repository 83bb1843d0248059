// Package console is cmdq's operator web console: server-rendered HTML
// pages under /ui/ on a cmdq.Client — an overview (throughput now, every
// processor from its heartbeat, recent failures, health, queue depths,
// poisoned commands by type), the poison list and each entry's page with
// requeue and discard (one at a time or in bulk, each behind a
// confirmation page), a command's page with its parameters and timeline,
// the recent commands over a range (1 h to 7 d) with their counts per
// state, outcome and latency charts, breakdowns by type and queue,
// filters and search, the queues with pause and resume, and a theme and
// auto-refresh choice remembered per browser. Every page works without
// JavaScript; one small same-origin script refreshes the changing part of
// a page and follows a command's page live. Nothing is loaded from
// elsewhere. docs/dashboard.md describes the pages and what each costs in
// storage calls.
//
// New returns an http.Handler that serves the paths /ui and /ui/…: mount it
// beside the JSON API (package api), which serves everything else, with
// the same tokens, allowed hosts and failed-authentication limiter:
//
//	tokens, err := api.ParseTokens(os.Getenv("CMDQ_TOKENS"))
//	limiter := api.NewAuthLimiter(0, logger) // failures at either count together
//	apiH, err := api.New(api.Config{Client: c, Tokens: tokens, AuthLimiter: limiter})
//	ui, err := console.New(console.Config{Client: c, Tokens: tokens, AuthLimiter: limiter})
//	srv := &http.Server{Addr: addr, Handler: console.Beside(apiH, ui)}
//
// (`cmdq serve` mounts both so; with an http.ServeMux, mount ui at "/ui/"
// and "/ui" and the API at "/"). Mounted under a prefix with
// http.StripPrefix, set Config.BasePath (links, cookies and redirects
// carry it).
//
// Security: with tokens, a viewer logs in with a reader or operator token
// (or sends it as a bearer token); the session is a signed cookie (Path
// /ui, HttpOnly, SameSite=Strict, Secure on TLS) that lasts
// SessionLifetime and ends on the server at logout. Every form carries a
// CSRF token bound to the session and is refused from another origin;
// failed logins count toward the address's limit of failed
// authentications (429 after a burst). Without tokens the console answers
// only loopback Host names and AllowedHosts (421 otherwise: DNS
// rebinding). Every page has a strict Content-Security-Policy (no inline
// script or style, no framing).
package console

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
)

// Config configures the console handler. Only Client is required; every
// other zero field takes the default its comment states.
type Config struct {
	// Client is what the pages read and act on: statuses, events,
	// listings, poison entries, requeue and discard, queue depths.
	// Required.
	Client *cmdq.Client
	// Health reports the health the overview shows: a short state name,
	// whether it is healthy, and any JSON-encodable detail (shown as a
	// list). Default: the client's processor (its state, healthy, its
	// cmdq.ProcessorHealth) when it has handlers, else always healthy with state
	// "ok". An api.HealthFunc fits.
	Health func() (state string, healthy bool, detail any)
	// Tokens are the accepted tokens and their roles: a reader or
	// operator token logs in (or is sent as a bearer token); only
	// operators see the poison list and its buttons. Give the API's
	// (api.ParseTokens parses the CMDQ_TOKENS format). Default nil: no
	// login, everyone is an operator (bind to loopback only).
	Tokens Tokens
	// AllowedHosts are host names (or IP addresses) that requests may name
	// in their Host header besides loopback ones (localhost, *.localhost,
	// 127.0.0.0/8, ::1), when no Tokens are configured; "*" allows any.
	// Others get 421, which stops DNS rebinding. Ignored with Tokens.
	// Default none.
	AllowedHosts []string
	// AuthFailureBurst is how many failed authentications (a wrong login,
	// an unknown or malformed bearer token) a client address may make in
	// a row; after that it gets 429 with Retry-After for 1 s, doubling
	// with each further failure up to 5 minutes. One failure is forgotten
	// per minute. Default 10; negative: never refused. Ignored with
	// AuthLimiter.
	AuthFailureBurst int
	// AuthLimiter, when set, counts the failed authentications instead of
	// a limiter of the console's own (made from AuthFailureBurst and
	// Logger): give the API handler mounted beside it the same one
	// (api.NewAuthLimiter, api.Config.AuthLimiter), so that failures at
	// either count together. Default nil.
	AuthLimiter *AuthLimiter
	// RequestTimeout is every request's deadline (default 10 s); storage
	// that does not answer in time gets a 503 page with Retry-After. A
	// bulk action stops starting requeues or discards at half of it.
	RequestTimeout time.Duration
	// StorageTryTimeout bounds one try of each storage call made for a
	// request (default RequestTimeout/4).
	StorageTryTimeout time.Duration
	// StorageMaxRetries is how often a failed try of such a call is
	// retried (default 2; negative: no retries).
	StorageMaxRetries int
	// MaxStream is the longest a command page's live feed stays open;
	// then the browser reconnects. Default 30 min.
	MaxStream time.Duration
	// BasePath is prepended to links, cookie paths and redirects when the
	// handler is mounted under a prefix with http.StripPrefix (for example
	// "/cmdq": the console is then at /cmdq/ui/). Default "".
	BasePath string
	// Logger receives request logs (debug), logins, logouts and operator
	// actions (info), storage outages and failed authentication (warn)
	// and server faults (error). The zero Logger discards them.
	Logger zerolog.Logger
}

// ErrInvalidConfig is wrapped by every error Config.Validate reports.
var ErrInvalidConfig = errors.New("console: invalid config")

// Validate reports every problem with c at once; each error wraps
// ErrInvalidConfig (and api.ErrInvalidTokens for token problems).
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, fmt.Errorf("%w: Client is required (cmdq.New)", ErrInvalidConfig))
	}
	for _, err := range c.settings().Problems() {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	return errors.Join(errs...)
}

// settings returns the request settings c shares with the API.
func (c Config) settings() httpserve.Settings {
	return httpserve.Settings{Tokens: c.Tokens, AllowedHosts: c.AllowedHosts, RequestTimeout: c.RequestTimeout,
		StorageTryTimeout: c.StorageTryTimeout, StorageMaxRetries: c.StorageMaxRetries, BasePath: c.BasePath, MaxStream: c.MaxStream}
}

// Tokens maps a bearer token to the roles it grants (map[string][]Role):
// the same type as api.Tokens, so one token list serves both.
type Tokens = httpserve.Tokens

// Role is what a token may do (the same type as api.Role).
type Role = httpserve.Role

// The roles the console knows: a reader views the pages, an operator also
// sees the poison list and requeues and discards. An issuer-only token
// cannot log in.
const (
	// RoleIssuer may only issue commands (through the API).
	RoleIssuer = httpserve.RoleIssuer
	// RoleReader may view the console's pages but the poison list.
	RoleReader = httpserve.RoleReader
	// RoleOperator may view every page, requeue and discard, cancel
	// commands and pause and resume queues.
	RoleOperator = httpserve.RoleOperator
)

// AuthLimiter counts failed authentications per client address (the same
// type as api.AuthLimiter; see Config.AuthLimiter).
type AuthLimiter = httpserve.Limiter

// NewAuthLimiter returns an AuthLimiter that allows burst failed
// authentications in a row (0 = 10; negative: never refuse) and logs
// failures to log at warn (it is api.NewAuthLimiter).
func NewAuthLimiter(burst int, log zerolog.Logger) *AuthLimiter {
	return httpserve.NewLimiter(burst, log)
}

// maxFormBytes is the largest request body the console takes (its biggest
// form, a bulk action on the poison list, stays under it): a request that
// announces more gets 413 before its route runs.
const maxFormBytes = 256 * 1024

// New returns the console handler, which serves /ui and /ui/… (see the
// package documentation for mounting it). It fails with the problems
// Config.Validate finds.
func New(cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	set := cfg.settings().WithDefaults()
	if cfg.Health == nil {
		cfg.Health = httpserve.ClientHealth(cfg.Client)
	}
	limiter := cfg.AuthLimiter
	if limiter == nil {
		limiter = httpserve.NewLimiter(cfg.AuthFailureBurst, cfg.Logger)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: no randomness for the session key: %w", err)
	}
	d := &dashboard{
		cfg: cfg, set: set, log: cfg.Logger,
		guard: httpserve.NewGuard(cfg.Tokens, cfg.AllowedHosts, limiter, "cmdq serve --allowed-hosts, console.Config.AllowedHosts"),
		key:   key, cop: http.NewCrossOriginProtection(), now: func() time.Time { return dashboardClock() }, base: cfg.BasePath + "/ui",
		src: newDashSource(cfg), revoked: map[string]int64{},
	}
	mux := http.NewServeMux()
	d.mount(mux)
	return httpserve.Wrap(mux, httpserve.Options{Name: "cmdq console", Settings: set, Guard: d.guard, LongLived: liveFeed, Extra: cancelTime, Log: cfg.Logger,
		MaxBodyBytes: maxFormBytes}), nil
}

// Beside returns a handler that serves the console handler ui (New's) on
// /ui and /ui/… and the API handler api (api.New's) on every other path:
// how `cmdq serve` mounts them. Unlike an http.ServeMux it routes by the
// raw path and nothing else: each handler answers its own paths — cleaning
// them, redirecting, 404 — after its Host check.
func Beside(api, ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == "/ui" || strings.HasPrefix(p, "/ui/") {
			ui.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// liveFeed reports whether r asks for a command page's live feed (GET
// /ui/commands/{id}/live), an event stream exempt from the request
// deadline: it bounds each storage call itself.
func liveFeed(r *http.Request) bool {
	p := r.URL.Path
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(p, "/ui/commands/") && strings.HasSuffix(p, "/live")
}
