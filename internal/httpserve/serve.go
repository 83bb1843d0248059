package httpserve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/storage"
)

// Defaults of the request settings both handlers take.
const (
	// DefaultRequestTimeout is every request's deadline when the
	// configuration gives 0 (10 s).
	DefaultRequestTimeout = 10 * time.Second
	// DefaultStorageMaxRetries is how often a failed try of a storage call
	// made for a request is retried, when the configuration gives 0 (2).
	DefaultStorageMaxRetries = 2
	// DefaultMaxStream is the longest an event stream or live feed stays
	// open, when the configuration gives 0 (30 min).
	DefaultMaxStream = 30 * time.Minute
)

// Settings are the request settings the API and the console share, as
// their Configs give them (zero: the default).
type Settings struct {
	// Tokens are the bearer tokens and their roles.
	Tokens Tokens
	// AllowedHosts are the Host names answered without tokens.
	AllowedHosts []string
	// RequestTimeout is every request's deadline.
	RequestTimeout time.Duration
	// StorageTryTimeout bounds one try of each storage call of a request.
	StorageTryTimeout time.Duration
	// StorageMaxRetries is how often a failed try is retried (negative:
	// never).
	StorageMaxRetries int
	// BasePath is the prefix the handler is mounted under.
	BasePath string
	// MaxStream is the longest a stream stays open.
	MaxStream time.Duration
}

// Problems lists every problem of s (the caller wraps each in its own
// ErrInvalidConfig).
func (s Settings) Problems() []error {
	var errs []error
	if s.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout is %s; use 0 for the default (%s) or a positive duration", s.RequestTimeout, DefaultRequestTimeout))
	}
	if s.StorageTryTimeout < 0 {
		errs = append(errs, fmt.Errorf("StorageTryTimeout is %s; use 0 for the default (RequestTimeout/4) or a positive duration", s.StorageTryTimeout))
	}
	if s.MaxStream < 0 {
		errs = append(errs, fmt.Errorf("MaxStream is %s; use 0 for the default (%s) or a positive duration", s.MaxStream, DefaultMaxStream))
	}
	if s.BasePath != "" && (!strings.HasPrefix(s.BasePath, "/") || strings.HasSuffix(s.BasePath, "/")) {
		errs = append(errs, fmt.Errorf("BasePath %q must start with '/' and not end with one (for example \"/cmdq\")", s.BasePath))
	}
	for _, h := range s.AllowedHosts {
		if err := ValidateAllowedHost(h); err != nil {
			errs = append(errs, fmt.Errorf("AllowedHosts: %w", err))
		}
	}
	if err := s.Tokens.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// WithDefaults returns s with every zero field set to its default
// (StorageTryTimeout: RequestTimeout/4; a negative StorageMaxRetries: 0).
func (s Settings) WithDefaults() Settings {
	if s.RequestTimeout == 0 {
		s.RequestTimeout = DefaultRequestTimeout
	}
	if s.StorageTryTimeout == 0 {
		s.StorageTryTimeout = s.RequestTimeout / 4
	}
	switch {
	case s.StorageMaxRetries == 0:
		s.StorageMaxRetries = DefaultStorageMaxRetries
	case s.StorageMaxRetries < 0:
		s.StorageMaxRetries = 0
	}
	if s.MaxStream == 0 {
		s.MaxStream = DefaultMaxStream
	}
	return s
}

// StorageCtx bounds the storage calls of a long-lived request (exempt
// from the deadline) as any request's: RequestTimeout (the call budget is
// already in r's context).
func (s Settings) StorageCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.RequestTimeout)
}

// Options configure Wrap.
type Options struct {
	// Name starts the log messages ("cmdq api", "cmdq console").
	Name string
	// Settings give the deadline and the storage call budget (with their
	// defaults set).
	Settings Settings
	// Guard checks the Host of every request.
	Guard *Guard
	// LongLived reports whether a request is a long-poll or a stream,
	// exempt from the deadline (it bounds each storage call itself with
	// Settings.StorageCtx). Nil: none is.
	LongLived func(*http.Request) bool
	// Extra, when set, gives a request more time than the deadline
	// (Settings.RequestTimeout + Extra(r)): a cancel that may wait for
	// other processes' processors. Nil: none does.
	Extra func(*http.Request) time.Duration
	// Check, when set, runs after the Host check and before the route; it
	// returns false when it has written the response.
	Check func(w http.ResponseWriter, r *http.Request) bool
	// Log receives request logs (debug) and panics (error).
	Log zerolog.Logger
	// MaxBodyBytes, when above 0, is the largest request body a route
	// takes: a request that announces a longer one (Content-Length) and
	// waits for 100 Continue (Expect: 100-continue) gets 413 before its
	// route runs, and no 100 Continue.
	MaxBodyBytes int64
	// TooLarge is the detail of that 413 (default: a sentence naming the
	// limit).
	TooLarge string
}

// readGrace is how long after a request's deadline its connection may
// still read the body: the handler's context ends first, so it answers
// 503 (or 400) rather than meeting a read error.
const readGrace = time.Second

// refusedGrace is how long the rest of a refused request's body may take
// to arrive before its connection is closed.
const refusedGrace = time.Second

// statusRecorder remembers the response status for the request log. When
// a request is refused (status 400 or above) before its body was read to
// the end, the rest of the body gets refusedGrace to arrive: net/http
// reads it before answering, as slowly as the client sends it.
type statusRecorder struct {
	http.ResponseWriter
	status int
	body   *bodyTracker // nil: the request has no body
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
		if code >= 400 && r.body != nil && !r.body.eof.Load() {
			// What is left of the body gets refusedGrace to arrive
			// (net/http reads it before answering, to keep the
			// connection): a client sending at speed finishes and reads
			// the answer; a slow one is cut off, with its connection.
			_ = http.NewResponseController(r.ResponseWriter).SetReadDeadline(time.Now().Add(refusedGrace))
		}
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return r.ResponseWriter.Write(b)
}

// bodyTracker notes when a request body has been read to its end.
type bodyTracker struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *bodyTracker) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Wrap returns next behind the checks and limits every request gets:
// panics are recovered as 500 problems (logged with a reference), every
// request is logged at debug, gets its deadline (unless LongLived) and its
// storage call budget, and passes the Host check and Check before its
// route.
func Wrap(next http.Handler, o Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		if HasBody(r) {
			rec.body = &bodyTracker{ReadCloser: r.Body}
			r.Body = rec.body
		}
		ctx, cancel := r.Context(), context.CancelFunc(func() {})
		if o.LongLived == nil || !o.LongLived(r) {
			d := o.Settings.RequestTimeout
			if o.Extra != nil {
				d += o.Extra(r)
			}
			ctx, cancel = context.WithTimeout(ctx, d)
		}
		defer cancel()
		if o.LongLived == nil || !o.LongLived(r) {
			// Reading the body is bounded like the rest of the request
			// (the http.Server's ReadTimeout may be far longer, or none):
			// a slow body (slowloris) ends with the deadline, and so
			// does the connection. Long-lived requests set their own.
			d, _ := ctx.Deadline()
			_ = http.NewResponseController(w).SetReadDeadline(d.Add(readGrace))
		}
		r = r.WithContext(storage.WithCallBudget(ctx, o.Settings.StorageTryTimeout, o.Settings.StorageMaxRetries))
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				ref := NewRef()
				o.Log.Error().Str("ref", ref).Str("method", r.Method).Str("path", r.URL.Path).
					Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Msg(o.Name + ": handler panic")
				if rec.status == 0 {
					WriteProblem(rec, r, NewProblem(client.ProblemInternal, "the server failed unexpectedly; reference "+ref+" is in its log"))
				}
			}
			o.Log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Int("status", rec.status).
				Dur("duration", time.Since(start)).Msg(o.Name + ": request")
		}()
		if !o.Guard.CheckHost(rec, r) || (o.Check != nil && !o.Check(rec, r)) {
			return
		}
		if p := checkContentEncoding(rec, r); p != nil {
			WriteProblem(rec, r, p)
			return
		}
		if o.MaxBodyBytes > 0 && r.ContentLength > o.MaxBodyBytes && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			// The client waits for 100 Continue before it sends the
			// body: it gets the 413 instead. (A client that sends its body
			// at once has it read up to the limit by the route, and then
			// gets the 413, rather than a connection closed under it.)
			detail := o.TooLarge
			if detail == "" {
				detail = fmt.Sprintf("The request body is %d bytes, over the %d-byte limit; send a smaller one.", r.ContentLength, o.MaxBodyBytes)
			}
			WriteProblem(rec, r, NewProblem(client.ProblemTooLarge, detail))
			return
		}
		next.ServeHTTP(rec, r)
	})
}

// checkContentEncoding refuses (415, with Accept-Encoding: identity, RFC
// 9110 section 15.5.16) a body with a Content-Encoding other than
// identity: no route decodes one, and read as it is, a body labelled gzip
// would be taken for plain JSON.
func checkContentEncoding(w http.ResponseWriter, r *http.Request) *client.Problem {
	if !HasBody(r) {
		return nil
	}
	for _, h := range r.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(h, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				w.Header().Set("Accept-Encoding", "identity")
				return NewProblem(client.ProblemUnsupportedMediaType, fmt.Sprintf("Content-Encoding %s is not supported; send the body uncompressed, without a Content-Encoding header", QuoteClip(c)))
			}
		}
	}
	return nil
}

// NewRef returns a short random reference that ties an answer to its log
// line.
func NewRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// StorageUnavailable reports whether err means storage did not answer: the
// driver says so (storage.ErrUnavailable), or the request's deadline or a
// storage try's timeout passed.
func StorageUnavailable(err error) bool {
	return errors.Is(err, storage.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// NotFound reports whether err says the command (or poison entry) does
// not exist.
func NotFound(err error) bool {
	return errors.Is(err, cmdq.ErrNotFound) || errors.Is(err, storage.ErrNotFound)
}

// ClientHealth is the default health of both handlers: the client's
// processor (its state, whether it is healthy, its cmdq.ProcessorHealth as detail)
// when the client has handlers, else always healthy with state "ok" and,
// as detail, the storage accounts' states and the doorbells of other
// processes' processors that did not ack this client's wake-ups, when
// there are any (nil otherwise).
func ClientHealth(c *cmdq.Client) func() (state string, healthy bool, detail any) {
	return func() (string, bool, any) {
		h := c.Health()
		if !c.Handles() {
			detail := map[string]any{}
			if len(h.Accounts) > 0 {
				detail["accounts"] = h.Accounts
			}
			if len(h.Unreachable) > 0 {
				detail["unreachable"] = h.Unreachable
			}
			if len(detail) == 0 {
				return "ok", true, nil
			}
			return "ok", true, detail
		}
		return string(h.State), h.Healthy(), h
	}
}
