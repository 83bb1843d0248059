// Package api is cmdq's JSON HTTP API as a net/http handler on a
// cmdq.Client: issue commands (POST /v1/commands), read their status and
// events (with long-polls and event streams), list, inspect, requeue and
// discard poisoned commands (/v1/poison), the OpenAPI description
// (/v1/openapi.json), health and readiness probes (/healthz, /readyz) and
// Prometheus metrics (/metrics). Mount the handler New returns in your own
// server, or run `cmdq serve`:
//
//	h, err := api.New(api.Config{Client: c, Tokens: tokens})
//	mux.Handle("/", h)
//
// The operator web console is package console, mounted beside it at /ui/
// with the same tokens; package client is the Go client of this API and
// defines its request and response bodies (client.IssueRequest,
// client.Problem, …), which this package reads and writes.
//
// Every error is an RFC 9457 problem (application/problem+json) whose detail
// says what to change. Bearer tokens carry roles (issuer, reader, operator);
// see Tokens and ParseTokens. The routes, status codes and examples are in
// docs/api.md.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/httpserve"
	"github.com/cmdq-dev/cmdq/metrics"
	"github.com/cmdq-dev/cmdq/storage"
)

// HealthFunc reports the service's health for /healthz and /readyz: a short
// state name (for a processor: starting, polling, working, idle, draining,
// stopped, unhealthy), whether it is healthy, and any JSON-encodable detail.
type HealthFunc func() (state string, healthy bool, detail any)

// Config configures the API handler.
type Config struct {
	// Client serves every route: issue (IssueRaw), status and events,
	// poison, health and readiness. Required. When it knows command types
	// (cmdq.Register, cmdq.Declare), POST /v1/commands rejects (400) other
	// types and params that do not decode into the type, before anything
	// is stored; a Client that knows none accepts any valid type name and
	// any JSON object (a processor elsewhere poisons what it cannot
	// handle).
	Client *cmdq.Client
	// Health reports health for /healthz and /readyz. Default: the
	// client's processor (state, healthy, its cmdq.ProcessorHealth as detail)
	// when it has handlers, else always healthy with state "ok".
	Health HealthFunc
	// Ready, when set, is asked by GET /readyz (after Health): an error
	// answers 503. It must return promptly. Default: the client's
	// CheckStorage, so that readiness follows storage within seconds (a
	// bounded probe, made only when no storage call succeeded recently).
	Ready func(ctx context.Context) error
	// Tokens are the accepted bearer tokens and their roles. Default nil: no
	// authentication, every request has every role (bind to loopback only).
	Tokens Tokens
	// MaxBodyBytes limits request bodies, in bytes (default
	// DefaultMaxBodyBytes, 1 MiB). Larger bodies get 413.
	MaxBodyBytes int64
	// Metrics, when set, counts commands issued through the API
	// (cmdq_commands_issued_total). Default nil.
	Metrics *metrics.Metrics
	// Gatherer is what GET /metrics exposes. Default
	// prometheus.DefaultGatherer (which metrics.New(nil) registers with).
	Gatherer prometheus.Gatherer
	// BasePath is prepended to the Location header of 202 responses when
	// the handler is mounted under a prefix with http.StripPrefix (for
	// example "/cmdq"). Default "".
	BasePath string
	// CORSOrigins are the web origins (scheme://host[:port], such as
	// "https://app.example.com") whose browser pages may call the API: they
	// get CORS answers (preflights, Access-Control-Allow-Origin) on /v1,
	// /healthz and /readyz and pass the cross-site check. No wildcards, and
	// credentials (cookies) are never allowed: such pages send bearer
	// tokens. Default none: only same-origin pages and non-browser clients.
	CORSOrigins []string
	// AllowedHosts are host names (or IP addresses) that requests may name
	// in their Host header besides loopback ones (localhost, *.localhost,
	// 127.0.0.0/8, ::1), when no Tokens are configured; "*" allows any.
	// Others get 421, which stops DNS rebinding: a page on the attacker's
	// name that resolves to this server. Ignored with Tokens. Default none.
	AllowedHosts []string
	// AuthFailureBurst is how many failed authentications (an unknown or
	// malformed bearer token) a client address may make in a row; after
	// that it gets 429 with Retry-After for 1 s, doubling with each further
	// failure up to 5 minutes. One failure is forgotten per minute. Default
	// DefaultAuthFailureBurst (10); negative: never refused. Failures are
	// logged at warn, at most once a minute per address. Behind a reverse
	// proxy every client has the proxy's address. Ignored with AuthLimiter.
	AuthFailureBurst int
	// AuthLimiter, when set, counts the failed authentications instead of
	// a limiter of the handler's own (made from AuthFailureBurst and
	// Logger): give the console mounted beside the API
	// (console.Config.AuthLimiter) the same one, so that failures at either
	// count together. Default nil.
	AuthLimiter *AuthLimiter
	// RequestTimeout is every request's deadline (default
	// DefaultRequestTimeout, 10 s). Storage calls still running when it
	// passes are abandoned and the client gets 503 with Retry-After. Keep
	// it well under the http.Server's WriteTimeout, or the client may get
	// no answer at all.
	RequestTimeout time.Duration
	// StorageTryTimeout bounds one try of each storage call made for a
	// request (default RequestTimeout/4), through storage.WithCallBudget.
	StorageTryTimeout time.Duration
	// StorageMaxRetries is how often a failed try of such a call is retried
	// (default DefaultStorageMaxRetries, 2; negative: no retries). The
	// processor keeps the store's own, longer settings.
	StorageMaxRetries int
	// MaxWait is the longest wait a status long-poll may ask for
	// (GET /v1/commands/{id}?wait=, or Prefer: wait=); a longer ?wait= is
	// 400, a longer Prefer is cut to it. Keep it well under the
	// http.Server's ReadTimeout and WriteTimeout unless the server lets
	// handlers extend them (net/http's does). Default DefaultMaxWait (30 s).
	MaxWait time.Duration
	// StreamHeartbeat is how often an event stream
	// (GET /v1/commands/{id}/events with Accept: text/event-stream) sends
	// a comment line while nothing happens, so that proxies keep it open
	// and clients notice a dead one. Default DefaultStreamHeartbeat (15 s).
	StreamHeartbeat time.Duration
	// MaxStream is the longest an event stream stays open; then it ends
	// and its client reconnects with Last-Event-ID (EventSource does so
	// by itself). Default DefaultMaxStream (30 min).
	MaxStream time.Duration
	// Logger receives request logs (debug), operator actions (info), storage
	// outages and failed authentication (warn) and server faults (error).
	// The zero Logger discards them.
	Logger zerolog.Logger
}

// DefaultRequestTimeout is Config.RequestTimeout's default (10 s).
const DefaultRequestTimeout = httpserve.DefaultRequestTimeout

// DefaultStorageMaxRetries is Config.StorageMaxRetries' default (2).
const DefaultStorageMaxRetries = httpserve.DefaultStorageMaxRetries

// RetryAfterSeconds is the Retry-After header (in seconds) of every 503
// answer: when a client may try again (5).
const RetryAfterSeconds = httpserve.RetryAfterSeconds

// ErrInvalidConfig is wrapped by every error Config.Validate reports.
var ErrInvalidConfig = errors.New("api: invalid config")

// Validate reports every problem with c at once; each error wraps
// ErrInvalidConfig (and ErrInvalidTokens for token problems).
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, fmt.Errorf("%w: Client is required (cmdq.New)", ErrInvalidConfig))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxBodyBytes is %d; use 0 for the default (1 MiB) or a positive byte count", ErrInvalidConfig, c.MaxBodyBytes))
	}
	if c.MaxWait < 0 || c.StreamHeartbeat < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxWait %s and StreamHeartbeat %s must not be negative (0 = the defaults %s and %s)", ErrInvalidConfig,
			c.MaxWait, c.StreamHeartbeat, DefaultMaxWait, DefaultStreamHeartbeat))
	}
	for _, err := range c.settings().Problems() {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	for _, o := range c.CORSOrigins {
		if _, err := normalizeOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("%w: CORSOrigins: %w", ErrInvalidConfig, err))
		}
	}
	return errors.Join(errs...)
}

// settings returns the request settings c shares with the console.
func (c Config) settings() httpserve.Settings {
	return httpserve.Settings{Tokens: c.Tokens, AllowedHosts: c.AllowedHosts, RequestTimeout: c.RequestTimeout,
		StorageTryTimeout: c.StorageTryTimeout, StorageMaxRetries: c.StorageMaxRetries, BasePath: c.BasePath, MaxStream: c.MaxStream}
}

type server struct {
	cfg         Config
	set         httpserve.Settings // the shared request settings, defaults set
	guard       *httpserve.Guard   // tokens, limiter, Host check
	log         zerolog.Logger
	corsOrigins map[string]bool // normalized CORSOrigins
	cop         *http.CrossOriginProtection
}

// New returns the API handler. It fails with the problems Config.Validate
// finds.
func New(cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	set := cfg.settings().WithDefaults()
	cfg.MaxWait = cmp.Or(cfg.MaxWait, DefaultMaxWait)
	cfg.StreamHeartbeat = cmp.Or(cfg.StreamHeartbeat, DefaultStreamHeartbeat)
	limiter := cfg.AuthLimiter
	if limiter == nil {
		limiter = NewAuthLimiter(cfg.AuthFailureBurst, cfg.Logger)
	}
	if types := cfg.Client.Types(); len(types) > 0 {
		cfg.Metrics.LabelTypes(types...)
	}
	if cfg.Health == nil {
		cfg.Health = httpserve.ClientHealth(cfg.Client)
	}
	if cfg.Ready == nil {
		cfg.Ready = cfg.Client.CheckStorage
	}
	s := &server{cfg: cfg, set: set, guard: httpserve.NewGuard(cfg.Tokens, cfg.AllowedHosts, limiter, "cmdq serve --allowed-hosts, api.Config.AllowedHosts"),
		log: cfg.Logger, corsOrigins: map[string]bool{}, cop: http.NewCrossOriginProtection()}
	for _, o := range cfg.CORSOrigins {
		n, _ := normalizeOrigin(o) // Validate checked it
		s.corsOrigins[n] = true
		if err := s.cop.AddTrustedOrigin(n); err != nil {
			return nil, fmt.Errorf("%w: CORSOrigins: %w", ErrInvalidConfig, err)
		}
	}
	mux := http.NewServeMux()
	route := func(path string, methods map[string]http.HandlerFunc) {
		allow := make([]string, 0, len(methods)+1)
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete} {
			if h, ok := methods[m]; ok {
				mux.HandleFunc(m+" "+path, h)
				allow = append(allow, m)
				if m == http.MethodGet {
					allow = append(allow, http.MethodHead)
				}
			}
		}
		allowed := strings.Join(allow, ", ")
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allowed)
			writeProblem(w, r, newProblem(client.ProblemMethodNotAllowed, fmt.Sprintf("%s does not accept %s; use %s", path, quoteClip(r.Method), allowed)))
		})
	}
	route("/v1/commands", map[string]http.HandlerFunc{http.MethodGet: s.listCommands, http.MethodPost: s.issue})
	route("/v1/commands/{id}", map[string]http.HandlerFunc{http.MethodGet: s.get})
	route("/v1/commands/{id}/events", map[string]http.HandlerFunc{http.MethodGet: s.events})
	route("/v1/poison", map[string]http.HandlerFunc{http.MethodGet: s.listPoison})
	route("/v1/poison/{id}", map[string]http.HandlerFunc{http.MethodGet: s.getPoison, http.MethodDelete: s.discard})
	route("/v1/poison/{id}/requeue", map[string]http.HandlerFunc{http.MethodPost: s.requeue})
	route("/v1/commands/{id}/cancel", map[string]http.HandlerFunc{http.MethodPost: s.cancel})
	route("/v1/commands/{id}/run-now", map[string]http.HandlerFunc{http.MethodPost: s.runNow})
	route("/v1/queues", map[string]http.HandlerFunc{http.MethodGet: s.listQueues})
	route("/v1/periodic", map[string]http.HandlerFunc{http.MethodGet: s.listPeriodic})
	route("/v1/periodic/{name}", map[string]http.HandlerFunc{http.MethodGet: s.getPeriodic})
	route("/v1/periodic/{name}/trigger", map[string]http.HandlerFunc{http.MethodPost: s.triggerPeriodic})
	route("/v1/queues/{name}/pause", map[string]http.HandlerFunc{http.MethodPost: s.pauseQueue})
	route("/v1/queues/{name}/resume", map[string]http.HandlerFunc{http.MethodPost: s.resumeQueue})
	route("/v1/processors", map[string]http.HandlerFunc{http.MethodGet: s.listProcessors})
	route("/v1/limits", map[string]http.HandlerFunc{http.MethodGet: s.listLimits})
	doc, err := openAPIFor(cfg.BasePath)
	if err != nil {
		return nil, fmt.Errorf("api: the embedded OpenAPI description: %w", err)
	}
	route("/v1/openapi.json", map[string]http.HandlerFunc{http.MethodGet: s.openAPI(doc)})
	route("/healthz", map[string]http.HandlerFunc{http.MethodGet: s.healthz})
	route("/readyz", map[string]http.HandlerFunc{http.MethodGet: s.readyz})
	metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
	route("/metrics", map[string]http.HandlerFunc{http.MethodGet: func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.authorize(w, r, RoleReader); ok {
			metrics.ServeHTTP(w, r)
		}
	}})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(client.ProblemNotFound, fmt.Sprintf("no route %s; the API's routes are under /v1/commands, /v1/poison, /v1/queues, /v1/periodic, /v1/processors and /v1/limits (see docs/api.md; the operator console, package console, is mounted at /ui/)", quoteClip(r.URL.Path))))
	})
	return httpserve.Wrap(mux, httpserve.Options{Name: "cmdq api", Settings: set, Guard: s.guard, LongLived: longLived, Extra: extraTime, Check: s.check, Log: cfg.Logger,
		MaxBodyBytes: cfg.MaxBodyBytes, TooLarge: tooLarge(cfg.MaxBodyBytes).Detail}), nil
}

// authorize checks the bearer token for need; on failure it writes the
// problem (httpserve.Guard.Authorize).
func (s *server) authorize(w http.ResponseWriter, r *http.Request, need Role) (who string, ok bool) {
	return s.guard.Authorize(w, r, need)
}

// pathID reads and validates {id}; on failure it writes a 400 problem.
func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := cmdq.NormalizeID(r.PathValue("id"))
	if err := cmdq.ValidateID(id); err != nil {
		writeProblem(w, r, newProblem(client.ProblemInvalidID, fmt.Sprintf("%s is not a command ID; IDs are canonical UUIDs such as 0b9f7a4e-3c1d-4e2a-9f61-2d8c5b7e4a10 (upper case is read as lower case)", quoteClip(id))))
		return "", false
	}
	return id, true
}

// fail maps an error from the commands or status packages to a problem.
// Unexpected errors are logged with a reference and reported as 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, cmdq.ErrNoCommand):
		writeProblem(w, r, newProblem(client.ProblemConflict, "this poison entry has no stored command (a malformed message, or one naming a command that was never stored), so there is nothing to requeue; fix the producer, then DELETE /v1/poison/{id} to remove the entry"))
	case errors.Is(err, cmdq.ErrExpired):
		writeProblem(w, r, newProblem(client.ProblemGone, clipText(expiredText(err))))
	case errors.Is(err, cmdq.ErrNotFound), errors.Is(err, storage.ErrNotFound):
		writeProblem(w, r, newProblem(client.ProblemNotFound, "no command with this ID; check the ID (IDs from another cmdq prefix or storage account are not visible here; final commands are removed after their retention: completed ones after 7 days, discarded ones after 30, by default)"))
	case errors.Is(err, cmdq.ErrNotPoisoned):
		writeProblem(w, r, newProblem(client.ProblemConflict, "the command is not poisoned (it may have been requeued or discarded already); GET /v1/commands/{id} shows its state"))
	case errors.Is(err, cmdq.ErrStorageFull):
		s.storageFull(w, r, err)
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads the response.
		writeProblem(w, r, newProblem(client.ProblemUnavailable, "the request was canceled"))
	case httpserve.StorageUnavailable(err):
		ref := httpserve.NewRef()
		s.log.Warn().Err(err).Str("ref", ref).Str("method", r.Method).Str("path", r.URL.Path).Msg("cmdq api: storage unavailable")
		writeProblem(w, r, newProblem(client.ProblemUnavailable, fmt.Sprintf("storage did not answer in time or could not be reached; retry in %d seconds (a POST /v1/commands with the same id is safe to repeat). Reference %s is in the server's log", RetryAfterSeconds, ref)))
	default:
		ref := httpserve.NewRef()
		s.log.Error().Err(err).Str("ref", ref).Str("method", r.Method).Str("path", r.URL.Path).Msg("cmdq api: request failed")
		writeProblem(w, r, newProblem(client.ProblemInternal, "the server could not complete the request (storage may be unavailable); retry later. Reference "+ref+" is in the server's log"))
	}
}

// storageFull answers a write the store refused for lack of disk space:
// 507 with Retry-After, the detail naming the data directory and its
// free space (cmdq.ErrStorageFull).
func (s *server) storageFull(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Warn().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("cmdq api: storage full; write refused")
	writeProblem(w, r, newProblem(client.ProblemStorageFull, clipText(fullText(err))+fmt.Sprintf("; nothing was stored: retry in %d seconds, after space is freed", RetryAfterSeconds)))
}

// fullText is a storage-full error from the storage sentinel's text to
// the end of its first clause (it names the directory, its free space
// and what is needed).
func fullText(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, storage.ErrFull.Error()); i >= 0 {
		msg = msg[i:]
	}
	if i := strings.Index(msg, ";"); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// logCmd adds a command's ID and, when it has one, its trace ID to a log
// line: every log line about a command carries both.
func logCmd(ev *zerolog.Event, id, traceID string) *zerolog.Event {
	ev = ev.Str("command", id)
	if traceID != "" {
		ev = ev.Str("trace_id", traceID)
	}
	return ev
}

// traceIDOf returns the trace ID of a W3C traceparent header
// ("00-<32 hex>-<16 hex>-<2 hex>"), or "" when it is not one.
func traceIDOf(traceParent string) string {
	if len(traceParent) < 55 || traceParent[2] != '-' || traceParent[35] != '-' {
		return ""
	}
	id := traceParent[3:35]
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
	}
	return id
}

func (s *server) issue(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, RoleIssuer); !ok {
		return
	}
	if p := checkContentType(r); p != nil {
		w.Header().Set("Accept-Post", "application/json")
		writeProblem(w, r, p)
		return
	}
	req, p := DecodeIssueRequest(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), s.cfg.MaxBodyBytes)
	if p != nil {
		writeProblem(w, r, p)
		return
	}
	if types := s.cfg.Client.Types(); len(types) > 0 {
		if _, ok := s.cfg.Client.Lookup(req.Type); !ok {
			writeProblem(w, r, unknownTypeProblem(req.Type, types))
			return
		}
	}
	runAt, delay := ScheduleOf(req)
	// The W3C trace context of the caller (traceparent, tracestate): the
	// issue's span is its child and the command's attempts join its trace
	// (a header that does not parse is ignored).
	raw := cmdq.Raw{ID: req.ID, Type: req.Type, Params: req.Params, CorrelationID: req.CorrelationID, UniqueKey: req.UniqueKey, OrderKey: req.OrderKey, RunAt: runAt, Delay: delay,
		TraceParent: r.Header.Get("Traceparent"), TraceState: strings.Join(r.Header.Values("Tracestate"), ",")}
	if req.UniqueWindow != "" {
		raw.UniqueWindow, _ = time.ParseDuration(req.UniqueWindow) // DecodeIssueRequest checked it
	}
	res, err := s.cfg.Client.IssueRaw(r.Context(), raw)
	switch {
	case err == nil:
	case errors.Is(err, cmdq.ErrInvalidUnique):
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, clipText(trimPrefix(err)),
			client.FieldError{Pointer: "#/uniqueKey", Detail: clipText(paramsDetail(err))}))
		return
	case errors.Is(err, cmdq.ErrInvalidOrderKey), errors.Is(err, cmdq.ErrOrderKeyQueue):
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, clipText(trimPrefix(err)),
			client.FieldError{Pointer: "#/orderKey", Detail: clipText(paramsDetail(err))}))
		return
	case errors.Is(err, cmdq.ErrInvalidSchedule):
		ptr := "#/runAt"
		if req.Delay != "" {
			ptr = "#/delay"
		}
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, clipText(trimPrefix(err)),
			client.FieldError{Pointer: ptr, Detail: "at most 2 years ahead"}))
		return
	case errors.Is(err, cmdq.ErrStorageFull) && res.ID == "":
		s.storageFull(w, r, err)
		return
	case errors.Is(err, cmdq.ErrNotAccepted):
		// Stored, but neither enqueued nor marked for the reconciler:
		// nothing guarantees it runs, so it is not accepted. The client's
		// retry with the same id enqueues it.
		logCmd(s.log.Warn().Err(err), res.ID, traceIDOf(raw.TraceParent)).Msg("cmdq api: command stored but neither enqueued nor marked; answered 503")
		writeProblem(w, r, newProblem(client.ProblemUnavailable, fmt.Sprintf("storage is failing: command %s was stored but could not be queued; send the same request again (with \"id\":%q) to queue it", res.ID, res.ID)))
		return
	case errors.Is(err, cmdq.ErrEnqueueFailed) && res.ID != "":
		// The command is stored; the reconciler enqueues it later. For the
		// caller it is accepted.
		logCmd(s.log.Warn().Err(err), res.ID, traceIDOf(raw.TraceParent)).Msg("cmdq api: command stored but not enqueued; the reconciler will enqueue it")
	case errors.Is(err, cmdq.ErrIDConflict):
		writeProblem(w, r, newProblem(client.ProblemConflict, "a command with this id exists with a different type, params or correlationId; send the same body to get the existing command, or use a new id",
			client.FieldError{Pointer: "#/id", Detail: "already used with a different type, params or correlationId"}))
		return
	case errors.Is(err, cmdq.ErrParamsTooLarge), errors.Is(err, storage.ErrTooLarge):
		writeProblem(w, r, newProblem(client.ProblemTooLarge, sentence(err, cmdq.ErrParamsTooLarge),
			client.FieldError{Pointer: "#/params", Detail: "too large"}))
		return
	case errors.Is(err, cmdq.ErrIDOutsideWindow):
		today := time.Now().UTC().Truncate(24 * time.Hour)
		from, to := today.AddDate(0, 0, -cmdq.IssueWindowPastDays), today.AddDate(0, 0, cmdq.IssueWindowFutureDays)
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, fmt.Sprintf("the id carries a date outside the issue window: an id that carries a time (a UUIDv7, or cmdq's UUIDv8) is accepted only when it is dated from %s to %s (UTC: %d days before today to %d day after); leave the id out to get a new one, or send a new UUIDv7 or a UUIDv4",
			from.Format(time.DateOnly), to.Format(time.DateOnly), cmdq.IssueWindowPastDays, cmdq.IssueWindowFutureDays),
			client.FieldError{Pointer: "#/id", Detail: fmt.Sprintf("outside the issue window (%s to %s, UTC)", from.Format(time.DateOnly), to.Format(time.DateOnly))}))
		return
	case errors.Is(err, cmdq.ErrInvalidParams):
		// The params do not decode into the type's Go type (the Issuer
		// checks it for every type this process registers or declares).
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, sentence(err, cmdq.ErrInvalidParams),
			client.FieldError{Pointer: "#/params", Detail: paramsDetail(err)}))
		return
	case errors.Is(err, cmdq.ErrInvalidType), errors.Is(err, cmdq.ErrInvalidID):
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, clipText(trimPrefix(err))))
		return
	default:
		s.fail(w, r, err)
		return
	}
	loc := s.cfg.BasePath + "/v1/commands/" + res.ID
	w.Header().Set("Location", loc)
	if !res.Existing {
		s.cfg.Metrics.CommandIssued(req.Type)
		resp := client.IssueResponse{ID: res.ID, Status: cmdq.StatePending, RunAt: res.RunAt}
		if res.RunAt.After(time.Now()) {
			resp.Status = cmdq.StateScheduled
		}
		writeJSON(w, http.StatusAccepted, resp)
		return
	}
	st, err := s.cfg.Client.Get(r.Context(), res.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, client.IssueResponse{ID: res.ID, Status: st.State, Duplicate: res.Duplicate, RunAt: st.RunAt})
}

// sentence is err's message after its sentinel's text ("cmdq: params too
// large: the params of …" → "The params of …."), as one sentence: capital
// first letter, a full stop at the end. A message that does not start with
// the sentinel's text is used whole, without a leading "cmdq: ".
func sentence(err, sentinel error) string {
	msg := strings.TrimPrefix(err.Error(), sentinel.Error()+": ")
	msg = strings.TrimPrefix(msg, "cmdq: ")
	if msg == "" {
		return msg
	}
	msg = strings.ToUpper(msg[:1]) + msg[1:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}

// trimPrefix drops a leading "cmdq: " from an error message shown to API
// users.
func trimPrefix(err error) string {
	return strings.TrimPrefix(err.Error(), "cmdq: ")
}

// paramsDetail is the part of an ErrInvalidParams error after its
// sentinel's text: what is wrong with the params.
func paramsDetail(err error) string {
	msg := strings.TrimPrefix(err.Error(), cmdq.ErrInvalidParams.Error()+": ")
	if i := strings.Index(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

func (s *server) listPoison(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, RoleOperator); !ok {
		return
	}
	q := r.URL.Query()
	var errs []client.FieldError
	for name := range q {
		if name != "type" && name != "limit" && name != "continuation" {
			errs = append(errs, client.FieldError{Pointer: "query:" + clipText(name), Detail: "unknown query parameter; use type, limit and continuation"})
		}
	}
	pq := cmdq.PoisonQuery{Type: q.Get("type"), Continuation: q.Get("continuation")}
	if pq.Type != "" {
		if err := cmdq.ValidateType(pq.Type); err != nil {
			errs = append(errs, client.FieldError{Pointer: "query:type", Detail: typeDetail(pq.Type)})
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > cmdq.MaxPoisonLimit {
			errs = append(errs, client.FieldError{Pointer: "query:limit", Detail: fmt.Sprintf("limit must be a whole number from 1 to %d (default %d)", cmdq.MaxPoisonLimit, cmdq.DefaultPoisonLimit)})
		} else {
			pq.Limit = n
		}
	}
	if len(errs) > 0 {
		writeProblem(w, r, newProblem(client.ProblemInvalidRequest, errs[0].Detail, errs...))
		return
	}
	page, err := s.cfg.Client.ListPoison(r.Context(), pq)
	if err != nil {
		if errors.Is(err, cmdq.ErrInvalidContinuation) {
			writeProblem(w, r, newProblem(client.ProblemInvalidRequest, "the continuation token is not valid; pass the continuation from the previous page unchanged, or omit it to start over",
				client.FieldError{Pointer: "query:continuation", Detail: "invalid token"}))
			return
		}
		s.fail(w, r, err)
		return
	}
	if page.Entries == nil {
		page.Entries = []cmdq.PoisonEntry{}
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *server) getPoison(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, RoleOperator); !ok {
		return
	}
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	e, err := s.cfg.Client.GetPoison(r.Context(), id)
	if err != nil {
		if errors.Is(err, cmdq.ErrNotFound) || errors.Is(err, storage.ErrNotFound) {
			writeProblem(w, r, newProblem(client.ProblemNotFound, "no poison entry for this command ID; GET /v1/poison lists the poisoned commands"))
			return
		}
		s.fail(w, r, err)
		return
	}
	resp := client.PoisonEntryResponse{PoisonEntry: e}
	// The params (one more point read); an entry of a malformed message
	// has no stored command, hence none.
	if _, params, err := s.cfg.Client.GetParams(r.Context(), id); err == nil {
		resp.Params = params
	} else if !errors.Is(err, cmdq.ErrNotFound) && !errors.Is(err, storage.ErrNotFound) {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *server) requeue(w http.ResponseWriter, r *http.Request) {
	id, ok := s.poisonAction(w, r, s.cfg.Client.Requeue, "requeued")
	if !ok {
		return
	}
	w.Header().Set("Location", s.cfg.BasePath+"/v1/commands/"+id)
	writeJSON(w, http.StatusAccepted, client.IssueResponse{ID: id, Status: cmdq.StatePending})
}

func (s *server) discard(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.poisonAction(w, r, s.cfg.Client.Discard, "discarded"); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}

// poisonAction runs a requeue or discard (act, logged as done) for the
// operator on the {id} of r. On failure it writes the problem and returns
// ok=false; on success the caller writes the response.
func (s *server) poisonAction(w http.ResponseWriter, r *http.Request, act func(ctx context.Context, id, by string) error, done string) (id string, ok bool) {
	who, ok := s.authorize(w, r, RoleOperator)
	if !ok {
		return "", false
	}
	if id, ok = pathID(w, r); !ok {
		return "", false
	}
	if httpserve.HasBody(r) {
		// The route takes no body; one that is not JSON is what a
		// cross-site form would send.
		if p := checkContentType(r); p != nil {
			writeProblem(w, r, p)
			return "", false
		}
	}
	if err := act(r.Context(), id, "api:"+who); err != nil {
		s.failPoisonAction(w, r, id, err)
		return "", false
	}
	s.log.Info().Str("command", id).Str("by", who).Msg("cmdq api: poisoned command " + done)
	return id, true
}

// failPoisonAction reports a failed requeue or discard. A command that
// exists but has no poison entry is a 409 naming its state, not a 404.
func (s *server) failPoisonAction(w http.ResponseWriter, r *http.Request, id string, err error) {
	if errors.Is(err, cmdq.ErrNotFound) || errors.Is(err, storage.ErrNotFound) {
		st, gerr := s.cfg.Client.Get(r.Context(), id)
		if gerr == nil {
			writeProblem(w, r, newProblem(client.ProblemConflict, fmt.Sprintf("the command is %s, not poisoned; only poisoned commands can be requeued or discarded", st.State)))
			return
		}
		if !errors.Is(gerr, cmdq.ErrNotFound) {
			err = gerr
		}
	}
	s.fail(w, r, err)
}

func (s *server) health() client.HealthResponse {
	state, ok, detail := s.cfg.Health()
	return client.HealthResponse{State: state, Healthy: ok, Detail: detail}
}

// healthFor returns h as r may see it: the detail (for a processor, its
// last error, which can name the storage endpoint and account) only for a
// request with the reader role; without it, the state and healthy flag.
// /healthz and /readyz answer through it.
func (s *server) healthFor(r *http.Request, h client.HealthResponse) client.HealthResponse {
	if _, p := s.guard.Auth.Check(r, RoleReader); p != nil {
		h.Detail = nil
	}
	return h
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.healthFor(r, s.health()))
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	h := s.health()
	if !h.Healthy {
		writeProblem(w, r, newProblem(client.ProblemUnavailable, fmt.Sprintf("the service is %s; GET /healthz shows the last fault", h.State)))
		return
	}
	if err := s.cfg.Ready(r.Context()); errors.Is(err, cmdq.ErrStorageFull) {
		why := "the store's disk is full (GET /healthz with a reader token names the directory)"
		if _, p := s.guard.Auth.Check(r, RoleReader); p == nil {
			why = fullText(err)
		}
		writeProblem(w, r, newProblem(client.ProblemUnavailable, "not ready: "+clipText(why)+"; new commands are refused (507) until space is freed, reads are served"))
		return
	} else if err != nil {
		s.log.Debug().Err(err).Msg("cmdq api: not ready")
		writeProblem(w, r, newProblem(client.ProblemUnavailable, "storage is not answering; the server is not ready until it does"))
		return
	}
	writeJSON(w, http.StatusOK, s.healthFor(r, h))
}

// expiredText is the detail of a 410: the record layer's sentence from
// "(issued …" on (it names the issue day and the retention), without the
// wrapped sentinels' texts.
func expiredText(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "(issued "); i >= 0 {
		msg = "the command " + msg[i:]
	}
	if i := strings.LastIndex(msg, " ("); i >= 0 && strings.HasSuffix(msg, ")") {
		msg = msg[:i]
	}
	return msg
}
