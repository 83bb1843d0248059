package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/console"
	"github.com/cmdq-dev/cmdq/internal/engine/tuning"
	"github.com/cmdq-dev/cmdq/internal/testhook"
	"github.com/cmdq-dev/cmdq/metrics"
	"github.com/cmdq-dev/cmdq/storage"
)

// defaultAddr is serve's listen address.
const defaultAddr = "127.0.0.1:8080"

// procFlags tune the processor of serve and worker.
type procFlags struct {
	noDemo          bool
	concurrency     int
	queueWeights    string
	minPollInterval time.Duration
	maxPollInterval time.Duration
	drainTimeout    time.Duration
	poisonCeiling   int
	maxDeferrals    int
	worker          string
	periodic        []string
	globalLimits    []string
	rates           []string
	testClockSkew   time.Duration

	doorbellListen    string
	doorbellAdvertise string
	noDoorbell        bool

	// Test instrumentation for the reliability suite (internal/chaos),
	// hidden from --help.
	demoJournal string
	demoLease   time.Duration

	// tracer, when set, is the Client's TracerProvider (setupTracing).
	tracer *sdktrace.TracerProvider

	// declareOnly declares the demo types instead of registering their
	// handlers (serve --no-processor).
	declareOnly bool
}

func (f *procFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.BoolVar(&f.noDemo, "no-demo", false, "do not register the demo handlers (demo.echo, demo.sleep, demo.fail, demo.steps)")
	fl.IntVar(&f.concurrency, "concurrency", cmdq.DefaultConcurrency, "most handlers run at once")
	fl.StringVar(&f.queueWeights, "queue-weights", "", "share the handlers between queues under saturation: queue=WEIGHT,... (e.g. critical=6,default=3,low=1: 60/30/10 % of the starts while every queue has more work than slots; a queue with no work lends its share, and none is starved); weights 1..1000, a queue left out weighs 1. Default none: first come, first served")
	fl.DurationVar(&f.minPollInterval, "min-poll-interval", cmdq.DefaultMinPollInterval, "wait after the first empty poll of a queue, doubling up to --max-poll-interval")
	fl.DurationVar(&f.maxPollInterval, "max-poll-interval", cmdq.DefaultMaxPollInterval, "longest wait between polls of an empty queue (backoff from --min-poll-interval); a wake-up from another process ends it at once")
	fl.StringVar(&f.doorbellListen, "doorbell-listen", cmdq.DefaultDoorbellListen, "UDP address the processor hears wake-ups from other processes on (port 0: a free one); the default serves processes on this machine only: give 0.0.0.0:7311 for workers on other machines and open that port to the web tier")
	fl.StringVar(&f.doorbellAdvertise, "doorbell-advertise", "", "address other processes ring (host:port), published in the heartbeat row. Default none: the address listened on, with 0.0.0.0 replaced by this machine's first non-loopback address; give it behind NAT or as a pod's IP")
	fl.BoolVar(&f.noDoorbell, "no-doorbell", false, "send and hear no wake-ups between processes: find work by polling only")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", cmdq.DefaultDrainTimeout, "on SIGINT/SIGTERM, how long running handlers may finish")
	fl.IntVar(&f.poisonCeiling, "poison-ceiling", 0, "override every command type's poison ceiling (attempts before poisoning); 0 keeps each type's own (5 for the demo handlers)")
	fl.IntVar(&f.maxDeferrals, "max-deferrals", 0, "override every command type's MaxDeferrals (deferrals by a handler's RetryAfter that do not count toward the poison ceiling), up to 10000; 0 keeps each type's own (20 for the demo handlers)")
	fl.StringVar(&f.worker, "worker-id", "", "name of this processor in events and logs (default <hostname>-<pid>)")
	fl.StringArrayVar(&f.periodic, "periodic", nil, "issue a periodic command: NAME;SPEC;TYPE[;PARAMS], SPEC a cron expression (UTC; six fields with seconds first), @hourly/@daily/… or @every DURATION, e.g. 'heartbeat;@every 1m;demo.echo;{\"n\":1}'; repeat for more. Every process given the same NAME issues its ticks, one command per tick (docs/lifecycle.md). Default none")
	fl.StringArrayVar(&f.globalLimits, "global-concurrency", nil, "cap a command type across every process: TYPE=N runs at most N handlers of TYPE at once on every machine sharing the store and prefix (1-1000; 0 lifts the type's own limit here); repeat for more types. Give every process the same. Default none: each type's own (HandlerOptions.GlobalConcurrency)")
	fl.StringArrayVar(&f.rates, "rate", nil, "rate-limit a command type across every process: TYPE=N/DURATION starts at most N handlers of TYPE in any window of DURATION on every machine sharing the store and prefix, e.g. demo.sleep=10/1s (N at least 1, DURATION 1ms to 366 days); repeat for more types. Give every process the same. Default none: each type's own (HandlerOptions.Rate)")
	fl.StringVar(&f.demoJournal, "demo-journal", "", "test instrumentation: append one JSON line per demo handler execution, step and end to this file")
	fl.DurationVar(&f.demoLease, "demo-lease", 0, "test instrumentation: the demo handlers' lease (0 = the default, 30s)")
	fl.DurationVar(&f.testClockSkew, "test-clock-skew", 0, "test instrumentation: run as a machine whose clock is this far ahead (negative: behind) would, on a store with a clock of its own (Azure)")
	_ = fl.MarkHidden("test-clock-skew")
	_ = fl.MarkHidden("demo-journal")
	_ = fl.MarkHidden("demo-lease")
}

// parseGlobalLimits parses the --global-concurrency values (TYPE=N).
func parseGlobalLimits(vals []string) (map[string]int, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]int{}
	for _, v := range vals {
		t, n, ok := strings.Cut(v, "=")
		t = strings.TrimSpace(t)
		limit, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || t == "" || err != nil {
			return nil, fmt.Errorf("--global-concurrency %q: give TYPE=N, such as demo.sleep=2", v)
		}
		if err := cmdq.ValidateType(t); err != nil {
			return nil, fmt.Errorf("--global-concurrency %q: %w", v, err)
		}
		if limit < 0 || limit > cmdq.MaxGlobalConcurrency {
			return nil, fmt.Errorf("--global-concurrency %q: N must be 1 to %d (0 lifts the type's own limit)", v, cmdq.MaxGlobalConcurrency)
		}
		if _, dup := out[t]; dup {
			return nil, fmt.Errorf("--global-concurrency: %s given twice", t)
		}
		out[t] = limit
	}
	return out, nil
}

// addRecoveryFlag adds --recovery-delay (serve and worker) to c.
func addRecoveryFlag(c *cobra.Command, d *time.Duration) {
	c.Flags().DurationVar(d, "recovery-delay", cmdq.DefaultRecoveryDelay, "visibility delay of a recovery enqueue (a re-issue of a pending command, a retried enqueue, a repeated requeue, the reconciler's re-enqueue) of a command type this process neither handles nor declares: at least that type's lease (types known here use their lease + 1s)")
}

// checkRecovery validates --recovery-delay.
func checkRecovery(d time.Duration) error {
	if d <= 0 || d > storage.MaxVisibility {
		return fmt.Errorf("--recovery-delay %s: must be above 0 and at most %s (give at least the lease of the command types this process has no handler for)", d, storage.MaxVisibility)
	}
	return nil
}

// client returns the Client of serve and worker on st: the processor's
// settings from the flags, the demo handlers unless --no-demo, and a
// function that closes what it opened (the demo journal).
// recovery is the Client's RecoveryDelay (0: the default).
func (f *procFlags) client(st storage.Store, sf *storeFlags, log zerolog.Logger, o cmdq.Observer, recovery time.Duration) (*cmdq.Client, func() error, error) {
	closer := func() error { return nil }
	prefix := sf.prefix
	shards, err := sf.shardMap()
	if err != nil {
		return nil, nil, err
	}
	if f.demoLease < 0 {
		return nil, nil, fmt.Errorf("--demo-lease %s: must not be negative", f.demoLease)
	}
	limits, err := parseGlobalLimits(f.globalLimits)
	if err != nil {
		return nil, nil, err
	}
	weights, err := weightMap(f.queueWeights)
	if err != nil {
		return nil, nil, err
	}
	rates, err := parseRates(f.rates)
	if err != nil {
		return nil, nil, err
	}
	cfg := cmdq.Config{
		Prefix:            prefix,
		Shards:            shards,
		Worker:            f.worker,
		Concurrency:       f.concurrency,
		QueueWeights:      weights,
		MinPollInterval:   f.minPollInterval,
		MaxPollInterval:   f.maxPollInterval,
		DrainTimeout:      f.drainTimeout,
		Doorbell:          cmdq.Doorbell{Listen: f.doorbellListen, Advertise: f.doorbellAdvertise, Secret: sf.secret(), Off: f.noDoorbell},
		PoisonCeiling:     f.poisonCeiling,
		MaxDeferrals:      f.maxDeferrals,
		GlobalConcurrency: limits,
		Rates:             rates,
		Logger:            log,
		RecoveryDelay:     recovery,
	}
	if o != nil {
		cfg.Observers = []cmdq.Observer{o}
	}
	if f.tracer != nil {
		cfg.TracerProvider = f.tracer
	}
	c, err := newCmdqClient(st, cfg, f.testClockSkew)
	if err != nil {
		return nil, nil, err
	}
	if err := registerPeriodic(c, f.periodic); err != nil {
		return nil, nil, err
	}
	if f.noDemo {
		if err := errors.Join(checkWeightQueues(c, f.queueWeights, weights), checkLimitTypes(c, limits, rates)); err != nil {
			return nil, nil, err
		}
		return c, closer, nil
	}
	if f.declareOnly {
		if err := declareDemo(c, f.demoLease); err != nil {
			return nil, nil, fmt.Errorf("declare demo types: %w", err)
		}
		if err := checkWeightQueues(c, f.queueWeights, weights); err != nil {
			return nil, nil, err
		}
		return c, closer, nil
	}
	var j *demoJournal
	if f.demoJournal != "" {
		if j, err = openDemoJournal(f.demoJournal, f.worker); err != nil {
			return nil, nil, err
		}
		closer = j.Close
	}
	if err := registerDemo(c, f.demoLease, j); err != nil {
		_ = closer()
		return nil, nil, fmt.Errorf("register demo handlers: %w", err)
	}
	if err := errors.Join(checkWeightQueues(c, f.queueWeights, weights), checkLimitTypes(c, limits, rates)); err != nil {
		_ = closer()
		return nil, nil, err
	}
	return c, closer, nil
}

// checkLimitTypes refuses --global-concurrency and --rate for types that
// have no handler in this process, before the store is used.
func checkLimitTypes(c *cmdq.Client, limits map[string]int, rates map[string]cmdq.Rate) error {
	handled := []string{}
	for _, t := range c.Types() {
		if info, ok := c.Lookup(t); ok && info.Handled {
			handled = append(handled, t)
		}
	}
	names := "none"
	if len(handled) > 0 {
		names = strings.Join(handled, ", ")
	}
	var errs []error
	for _, flag := range []struct {
		name  string
		types []string
	}{{"--global-concurrency", slices.Sorted(maps.Keys(limits))}, {"--rate", slices.Sorted(maps.Keys(rates))}} {
		for _, t := range flag.types {
			if !slices.Contains(handled, t) {
				errs = append(errs, fmt.Errorf("%s: command type %q has no handler in this process (its handled types: %s); leave it out, or run it where its handler is registered", flag.name, t, names))
			}
		}
	}
	return errors.Join(errs...)
}

// weightMap parses --queue-weights (queue=WEIGHT,...).
func weightMap(s string) (map[string]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]int{}
	for _, e := range splitList(s) {
		q, n, ok := strings.Cut(e, "=")
		q = strings.TrimSpace(q)
		w, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || err != nil || q == "" {
			return nil, fmt.Errorf("--queue-weights %q: give queue=WEIGHT pairs separated by commas, each weight a whole number 1..%d (e.g. critical=6,default=3,low=1)", s, cmdq.MaxQueueWeight)
		}
		if _, dup := out[q]; dup {
			return nil, fmt.Errorf("--queue-weights %q: queue %s is given twice; give each queue once", s, q)
		}
		out[q] = w
	}
	if err := (cmdq.Config{QueueWeights: out}).Validate(); err != nil {
		return nil, fmt.Errorf("--queue-weights %q: %w", s, err)
	}
	return out, nil
}

// checkWeightQueues refuses --queue-weights naming a queue no type of c
// (registered or declared) routes to, before anything starts.
func checkWeightQueues(c *cmdq.Client, flag string, weights map[string]int) error {
	known := map[string]bool{}
	for _, t := range c.Types() {
		if info, ok := c.Lookup(t); ok {
			known[info.Options.Queue] = true
		}
	}
	var unknown []string
	for _, q := range slices.Sorted(maps.Keys(weights)) {
		if !known[q] {
			unknown = append(unknown, q)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	names := "none"
	if len(known) > 0 {
		names = strings.Join(slices.Sorted(maps.Keys(known)), ", ")
	}
	return fmt.Errorf("--queue-weights %q: weights for unknown queues %s: no command type of this process routes to them (its types' queues: %s); leave them out", flag, strings.Join(unknown, ", "), names)
}

// observer returns o as a cmdq.Observer, or nil for a nil o (an
// interface holding a nil *metrics.Metrics is not nil).
func observer(o *metrics.Metrics) cmdq.Observer {
	if o == nil {
		return nil
	}
	return o
}

// serveFlags are serve's own flags.
type serveFlags struct {
	store        storeFlags
	log          logFlags
	proc         procFlags
	addr         string
	tokens       string
	insecure     bool
	maxBodyBytes int64
	reqTimeout   time.Duration
	recovery     time.Duration
	corsOrigins  string
	allowedHosts string
	noProcessor  bool
}

// serverWriteTimeout is the http.Server's WriteTimeout; --request-timeout
// must leave room under it so a late answer still reaches the client.
const serverWriteTimeout = time.Minute

// maxRequestTimeout is the longest --request-timeout.
const maxRequestTimeout = serverWriteTimeout - 10*time.Second

func newServeCmd() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API, the operator console and a processor in one process",
		Long: `serve runs the HTTP API (issue commands, read status and events, handle
poisoned commands, /healthz, /readyz, /metrics), the operator console (/ui/)
and a processor in one process.

By default it uses the embedded store in ./cmdq-data, listens on
127.0.0.1:8080 and registers the demo handlers:
  demo.echo   {}                       completes at once (records its params as a step and as its output)
  demo.sleep  {"ms":N}                 sleeps N milliseconds
  demo.fail   {"times":K}              fails its first K attempts, then completes;
                                       K >= 5 (the poison ceiling) ends poisoned
  demo.steps  {"steps":N,"failAt":M}   records steps 1..N, fails once at step M,
                                       and the retry resumes from step M
Demo retries come after about a second.

With --no-processor it is the web tier of the production shape: the API and
the console only, no handler and no processor; workers (cmdq worker) on this
or other machines run the commands, woken at once by a wake-up from this
process (see --doorbell-listen on the workers, and docs/operations.md).

Without --tokens the server only listens on a loopback address; any other
--addr needs --tokens (or CMDQ_TOKENS), or --insecure to run without
authentication. SIGINT or SIGTERM stops taking requests and work, lets running
handlers finish (--drain-timeout) and exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), &f)
		},
	}
	f.store.add(c)
	f.store.addReserve(c)
	f.log.add(c)
	f.proc.add(c)
	c.Flags().StringVar(&f.addr, "addr", defaultAddr, "HTTP listen address host:port (port 0 picks a free port; the log says which)")
	c.Flags().StringVar(&f.tokens, "tokens", "", "bearer tokens and roles: token:role[+role],... with roles issuer, reader, operator (default none: no authentication, loopback only)")
	c.Flags().BoolVar(&f.insecure, "insecure", false, "allow a non-loopback --addr without --tokens (anyone who reaches the port may issue and discard commands)")
	c.Flags().Int64Var(&f.maxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "largest request body in bytes; larger ones get 413")
	c.Flags().StringVar(&f.allowedHosts, "allowed-hosts", "", "without --tokens: comma-separated host names besides loopback ones that requests may name in their Host header (\"*\" = any); others get 421 (DNS rebinding). Default none; with --insecure a non-wildcard --addr IP is added")
	c.Flags().StringVar(&f.corsOrigins, "cors-origins", "", "comma-separated web origins (scheme://host[:port]) whose browser pages may call the API (CORS); default none: only same-origin pages and non-browser clients")
	c.Flags().DurationVar(&f.reqTimeout, "request-timeout", api.DefaultRequestTimeout, "deadline of every HTTP request (at most 50s); storage that does not answer in time gets the client a 503 with Retry-After")
	c.Flags().BoolVar(&f.noProcessor, "no-processor", false, "the web tier: serve the API and the console only, running no handler and no processor (workers run them: cmdq worker); the demo types are declared, so their params are still checked")
	addRecoveryFlag(c, &f.recovery)
	return c
}

// splitList splits a comma-separated flag value, dropping empty entries and
// the spaces around each.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// allowedHosts adds the IP address of a specific non-loopback listen
// address (--insecure --addr 10.0.0.5:8080) to the allowed Host names: an
// IP literal cannot be rebound to another server. Wildcard addresses add
// nothing.
func allowedHosts(addr string, hosts []string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return hosts
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		hosts = append(hosts, ip.String())
	}
	return hosts
}

// isLoopback reports whether a listen address only accepts local connections.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--addr %q: %w (use host:port, e.g. 127.0.0.1:8080)", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// checkAddr refuses a non-loopback address without tokens unless insecure.
func checkAddr(addr string, tokens api.Tokens, insecure bool) error {
	lo, err := isLoopback(addr)
	if err != nil {
		return err
	}
	if !lo && len(tokens) == 0 && !insecure {
		return fmt.Errorf("refusing to listen on %s without authentication: set --tokens (or CMDQ_TOKENS) to token:role pairs, "+
			"listen on a loopback address such as 127.0.0.1:8080, or pass --insecure to accept unauthenticated requests from the network", addr)
	}
	return nil
}

func runServe(ctx context.Context, f *serveFlags) error {
	log, err := f.log.logger(os.Stderr)
	if err != nil {
		return err
	}
	tokens, err := api.ParseTokens(f.tokens)
	if err != nil {
		return fmt.Errorf("--tokens: %w", err)
	}
	if err := checkAddr(f.addr, tokens, f.insecure); err != nil {
		return err
	}
	if f.maxBodyBytes <= 0 {
		return fmt.Errorf("--max-body-bytes %d: must be positive", f.maxBodyBytes)
	}
	if f.reqTimeout <= 0 || f.reqTimeout > maxRequestTimeout {
		return fmt.Errorf("--request-timeout %s: must be above 0 and at most %s (the server's write timeout is %s)", f.reqTimeout, maxRequestTimeout, serverWriteTimeout)
	}
	if err := checkRecovery(f.recovery); err != nil {
		return err
	}
	if _, err := parseRates(f.proc.rates); err != nil { // before the store is opened: a bad value changes nothing
		return err
	}
	if _, err := parseGlobalLimits(f.proc.globalLimits); err != nil { // likewise
		return err
	}
	if f.noProcessor && len(f.proc.periodic) > 0 {
		return errors.New("--periodic needs a processor: give it to the workers (cmdq worker --periodic …), not to serve --no-processor")
	}
	f.proc.declareOnly = f.noProcessor
	raw, err := f.store.open(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := raw.Close(); err != nil {
			log.Error().Err(err).Msg("cmdq serve: close store")
		}
	}()
	if err := checkSpace(raw); err != nil {
		return err
	}
	if f.proc.tracer, err = startTracing(ctx, log, "cmdq serve", f.proc.worker); err != nil {
		return err
	}
	defer stopTracing(f.proc.tracer, log) // after the processor's stop: the last spans are flushed

	prom, m, err := newMetrics()
	if err != nil {
		return err
	}
	c, closeClient, err := f.proc.client(m.InstrumentStore(raw), &f.store, log, m, f.recovery)
	if err != nil {
		return err
	}
	defer func() { _ = closeClient() }()
	defer func() { _ = c.Stop(context.Background()) }() // before the store closes
	if !c.Handles() && !f.noProcessor {
		log.Warn().Msg("cmdq serve: no handlers registered (--no-demo): serving the API only; commands stay pending until a processor with handlers runs")
	}
	// Only known types get their own label; others count as "other".
	m.LabelTypes(c.Types()...)
	if err := watchQueues(ctx, c, m); err != nil {
		return err
	}
	h, err := serveHandler(c, tokens, f, m, prom, log)
	if err != nil {
		return err
	}
	// Opens the storage, and the processor when there are handlers: a
	// storage problem ends serve here, before it listens.
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	if f.noProcessor {
		// The web tier runs no processor: storage must answer before it
		// listens all the same.
		if err := c.CheckStorage(ctx); err != nil {
			return fmt.Errorf("storage: %w", describeStoreErr(err))
		}
	} else if err := c.Start(pctx); err != nil {
		return fmt.Errorf("start: %w", describeStoreErr(err))
	}

	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another server using the port? choose another with --addr)", f.addr, err)
	}
	// Bodies are small (MaxBodyBytes), answers are small: generous but
	// bounded timeouts keep slow or idle clients from holding connections.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: serverWriteTimeout, IdleTimeout: 2 * time.Minute}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()

	if lo, _ := isLoopback(f.addr); !lo && len(tokens) == 0 && len(allowedHosts(f.addr, splitList(f.allowedHosts))) == 0 {
		log.Warn().Str("addr", f.addr).Msg("cmdq serve: without --tokens only loopback Host names are answered (others get 421); add the names clients use with --allowed-hosts")
	}
	base := "http://" + ln.Addr().String()
	ev := log.Info().Str("url", base).Str("ui", base+"/ui/").Str("store", f.store.kind).Str("prefix", c.Prefix()).
		Bool("auth", len(tokens) > 0)
	if f.noProcessor {
		ev = ev.Bool("processor", false).Strs("declared", c.Types())
	} else {
		ev = ev.Strs("handlers", c.Types())
	}
	if ps := c.PeriodicNames(); len(ps) > 0 {
		ev = ev.Strs("periodic", ps)
	}
	if f.store.kind == "embedded" {
		ev = ev.Str("data", f.store.data)
	}
	ev.Msg("cmdq serve: listening")

	var runErr error
	select {
	case <-ctx.Done():
		log.Info().Msg("cmdq serve: signal received; draining (a second signal exits at once)")
	case err := <-srvErr:
		runErr = fmt.Errorf("http server: %w", err)
	case <-c.Stopped():
		runErr = fmt.Errorf("processor stopped: %w", describeStoreErr(c.Stop(context.Background())))
	}
	// A second signal kills the process: stop catching signals.
	if s, ok := ctx.Value(stopSignalsKey{}).(func()); ok {
		s()
	}
	shctx, cancel := context.WithTimeout(context.Background(), f.proc.drainTimeout+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("http shutdown: %w", err)
	}
	pcancel()
	if err := c.Stop(shctx); err != nil && runErr == nil {
		runErr = processorErr(err)
	}
	if runErr != nil {
		return runErr
	}
	log.Info().Msg("cmdq serve: stopped")
	return nil
}

// serveHandler returns serve's HTTP handler: the JSON API (package api)
// and, at /ui/, the operator console (package console), on one
// configuration of tokens, allowed hosts and failed-authentication limiter
// (failures at either count together). /healthz, /readyz and /metrics are
// the API's.
func serveHandler(c *cmdq.Client, tokens api.Tokens, f *serveFlags, m *metrics.Metrics, prom prometheus.Gatherer, log zerolog.Logger) (http.Handler, error) {
	hosts := allowedHosts(f.addr, splitList(f.allowedHosts))
	limiter := api.NewAuthLimiter(0, log)
	acfg := api.Config{
		Client: c, Tokens: tokens, MaxBodyBytes: f.maxBodyBytes,
		Metrics: m, Gatherer: prom, Logger: log, RequestTimeout: f.reqTimeout,
		CORSOrigins: splitList(f.corsOrigins), AllowedHosts: hosts, AuthLimiter: limiter,
	}
	if err := acfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w (check --cors-origins, --allowed-hosts, --request-timeout)", err)
	}
	apiH, err := api.New(acfg)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	ui, err := console.New(console.Config{Client: c, Tokens: tokens, AllowedHosts: hosts, AuthLimiter: limiter,
		RequestTimeout: f.reqTimeout, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return console.Beside(apiH, ui), nil
}

// stopSignalsKey carries the function that restores default signal handling.
type stopSignalsKey struct{}

// describeStoreErr adds a hint to storage errors that users can act on.
func describeStoreErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, storage.ErrClosed) {
		return fmt.Errorf("%w (the store was closed)", err)
	}
	return err
}

// serveMetrics serves GET /metrics of prom on addr until the returned
// function is called.
func serveMetrics(addr string, prom *prometheus.Registry, log zerolog.Logger) (stop func(), err error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: %w (use host:port, e.g. 127.0.0.1:9090)", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: listen on %s: %w (is another process using the port?)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(prom, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	if lo, _ := isLoopback(addr); !lo {
		log.Warn().Str("addr", addr).Msg("cmdq worker: /metrics is served without authentication on a non-loopback address")
	}
	log.Info().Str("url", "http://"+ln.Addr().String()+"/metrics").Msg("cmdq worker: serving metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// newMetrics returns a Prometheus registry with the Go and process
// collectors and cmdq's metrics on it.
func newMetrics() (*prometheus.Registry, *metrics.Metrics, error) {
	prom := prometheus.NewRegistry()
	prom.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(prom)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	return prom, m, nil
}

// watchQueues adds every queue c knows to the queue depth gauge.
func watchQueues(ctx context.Context, c *cmdq.Client, m *metrics.Metrics) error {
	for _, qn := range c.Queues() {
		q, err := c.StorageQueue(ctx, qn)
		if err != nil {
			return fmt.Errorf("open queue %s: %w", qn, describeStoreErr(err))
		}
		m.WatchQueue(q)
	}
	return nil
}

// workerFlags are worker's flags.
type workerFlags struct {
	store       storeFlags
	log         logFlags
	proc        procFlags
	runFor      time.Duration
	metricsAddr string
	recovery    time.Duration
}

func newWorkerCmd() *cobra.Command {
	var f workerFlags
	c := &cobra.Command{
		Use:   "worker",
		Short: "Run a processor only (no API), optionally time-boxed with --run-for",
		Long: `worker runs a processor without the HTTP API. Several workers may share one
Azure Storage queue (--store azure); the embedded store belongs to one process.

With --run-for D it processes for at most D and exits 0 before D has passed
(counted from process start), printing a one-line summary: for schedulers that
start a job every minute, use --run-for 55s. It stops taking work when the next
handler might not finish in time and leaves no message leased. It also stops
early when idle: once its queues are empty and its next poll (backing off up
to --max-poll-interval) would come after the time is up. The summary ends with
why it stopped: deadline, idle or cancelled (a signal).

Without --run-for it runs until SIGINT or SIGTERM, then drains.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorker(cmd.Context(), cmd, &f)
		},
	}
	f.store.add(c)
	f.store.addReserve(c)
	f.log.add(c)
	f.proc.add(c)
	c.Flags().DurationVar(&f.runFor, "run-for", 0, "process for at most this long, then exit 0 with a summary; it stops sooner when its queues are empty and its next poll would come too late (0 = until SIGINT/SIGTERM)")
	addRecoveryFlag(c, &f.recovery)
	c.Flags().StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics (the same as serve's /metrics, without authentication) on GET http://ADDR/metrics, e.g. 127.0.0.1:9090; port 0 picks a free port (the log says which). Default none")
	return c
}

func runWorker(ctx context.Context, cmd *cobra.Command, f *workerFlags) error {
	log, err := f.log.logger(os.Stderr)
	if err != nil {
		return err
	}
	if f.runFor < 0 {
		return fmt.Errorf("--run-for %s: must not be negative", f.runFor)
	}
	if err := checkRecovery(f.recovery); err != nil {
		return err
	}
	if _, err := parseRates(f.proc.rates); err != nil { // before the store is opened: a bad value changes nothing
		return err
	}
	if _, err := parseGlobalLimits(f.proc.globalLimits); err != nil { // likewise
		return err
	}
	st, err := f.store.open(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error().Err(err).Msg("cmdq worker: close store")
		}
	}()
	if err := checkSpace(st); err != nil {
		return err
	}
	if f.proc.tracer, err = startTracing(ctx, log, "cmdq worker", f.proc.worker); err != nil {
		return err
	}
	defer stopTracing(f.proc.tracer, log) // after the processor's stop: the last spans are flushed
	var prom *prometheus.Registry
	var m *metrics.Metrics
	if f.metricsAddr != "" {
		if prom, m, err = newMetrics(); err != nil {
			return err
		}
	}
	c, closeClient, err := f.proc.client(m.InstrumentStore(st), &f.store, log, observer(m), f.recovery)
	if err != nil {
		return err
	}
	defer func() { _ = closeClient() }()
	defer func() { _ = c.Stop(context.Background()) }() // before the store closes
	if !c.Handles() && len(c.PeriodicNames()) == 0 {
		return errors.New("worker has no handlers: the binary's only handlers are the demo ones, which --no-demo turned off; " +
			"to run your own handlers, build a program on package cmdq (see examples/)")
	}
	if m != nil {
		m.LabelTypes(c.Types()...)
		if err := watchQueues(ctx, c, m); err != nil {
			return err
		}
		stopMetrics, err := serveMetrics(f.metricsAddr, prom, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if f.runFor == 0 {
		log.Info().Str("store", f.store.kind).Strs("handlers", c.Types()).Strs("periodic", c.PeriodicNames()).Msg("cmdq worker: running until SIGINT/SIGTERM")
		if err := c.Run(ctx); err != nil {
			return processorErr(describeStoreErr(err))
		}
		log.Info().Msg("cmdq worker: stopped")
		return nil
	}
	// Count the box from process start, and keep a little for closing the
	// store and exiting.
	const exitSlack = 250 * time.Millisecond
	d := f.runFor - time.Since(processStart) - exitSlack
	if d <= 0 {
		return fmt.Errorf("--run-for %s is too short to start the worker", f.runFor)
	}
	sum, err := c.RunFor(ctx, d)
	if err != nil {
		return processorErr(describeStoreErr(err))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "cmdq worker: processed %d (completed %d, failed %d, poisoned %d, released %d, interrupted %d) in %s; stopped: %s\n",
		sum.Processed, sum.Completed, sum.Failed, sum.Poisoned, sum.Released, sum.Interrupted,
		sum.Duration.Round(time.Millisecond), sum.StoppedBecause)
	return nil
}

// processorErr says err came from the processor, once (the processor's
// own errors start with "processor: " already).
func processorErr(err error) error {
	if strings.HasPrefix(err.Error(), "processor: ") {
		return err
	}
	return fmt.Errorf("processor: %w", err)
}

// newCmdqClient is cmdq.New, or with --test-clock-skew (the reliability
// suite's instrumentation) a Client as a machine whose clock is off by
// skew runs it: its clock that far off, and its store's measured offset
// from the service's clock that much less (storage.ServerClock).
func newCmdqClient(st storage.Store, cfg cmdq.Config, skew time.Duration) (*cmdq.Client, error) {
	if skew == 0 {
		return cmdq.New(st, cfg)
	}
	c, err := testhook.NewClient(skewedStore{Store: st, by: skew}, cfg, tuning.Switches{LocalClockOffset: skew})
	if err != nil {
		return nil, err
	}
	return c.(*cmdq.Client), nil
}

// skewedStore is st as a machine whose clock is off by "by" measures the
// service's clock; it answers storage.Secret for st.
type skewedStore struct {
	storage.Store
	by time.Duration
}

func (s skewedStore) ClockOffset() (offset, uncertainty time.Duration, ok bool) {
	o, u, ok := storage.ClockOffset(s.Store)
	return o - s.by, u, ok
}

func (s skewedStore) SharedSecret() []byte { return storage.SharedSecret(s.Store) }
