package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/commands"
	"github.com/cmdq-dev/cmdq/handlers"
	"github.com/cmdq-dev/cmdq/processor"
	"github.com/cmdq-dev/cmdq/status"
	"github.com/cmdq-dev/cmdq/storage"
)

// defaultAddr is serve's listen address.
const defaultAddr = "127.0.0.1:8080"

// procFlags tune the processor of serve and worker.
type procFlags struct {
	noDemo          bool
	concurrency     int
	maxPollInterval time.Duration
	drainTimeout    time.Duration
	poisonCeiling   int
	worker          string

	// Test instrumentation for the reliability suite (internal/chaos),
	// hidden from --help.
	demoJournal string
	demoLease   time.Duration
}

func (f *procFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.BoolVar(&f.noDemo, "no-demo", false, "do not register the demo handlers (demo.echo, demo.sleep, demo.fail, demo.steps)")
	fl.IntVar(&f.concurrency, "concurrency", processor.DefaultConcurrency, "most handlers run at once")
	fl.DurationVar(&f.maxPollInterval, "max-poll-interval", processor.DefaultMaxPollInterval, "longest wait between polls of an empty queue (backoff from 100ms)")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", processor.DefaultDrainTimeout, "on SIGINT/SIGTERM, how long running handlers may finish")
	fl.IntVar(&f.poisonCeiling, "poison-ceiling", 0, "override every command type's poison ceiling (attempts before poisoning); 0 keeps each type's own (5 for the demo handlers)")
	fl.StringVar(&f.worker, "worker-id", "", "name of this processor in events and logs (default <hostname>-<pid>)")
	fl.StringVar(&f.demoJournal, "demo-journal", "", "test instrumentation: append one JSON line per demo handler execution, step and end to this file")
	fl.DurationVar(&f.demoLease, "demo-lease", 0, "test instrumentation: the demo handlers' lease (0 = the default, 30s)")
	_ = fl.MarkHidden("demo-journal")
	_ = fl.MarkHidden("demo-lease")
}

// registry returns the handler registry (the demo handlers unless
// --no-demo) and a function that closes what it opened (the demo journal).
func (f *procFlags) registry() (*handlers.Registry, func() error, error) {
	reg := handlers.NewRegistry()
	closer := func() error { return nil }
	if f.noDemo {
		return reg, closer, nil
	}
	if f.demoLease < 0 {
		return nil, nil, fmt.Errorf("--demo-lease %s: must not be negative", f.demoLease)
	}
	var j *demoJournal
	if f.demoJournal != "" {
		var err error
		if j, err = openDemoJournal(f.demoJournal, f.worker); err != nil {
			return nil, nil, err
		}
		closer = j.Close
	}
	if err := registerDemo(reg, f.demoLease, j); err != nil {
		_ = closer()
		return nil, nil, fmt.Errorf("register demo handlers: %w", err)
	}
	return reg, closer, nil
}

func (f *procFlags) config(prefix string, log zerolog.Logger, m processor.Metrics) processor.Config {
	return processor.Config{
		Prefix:          prefix,
		Worker:          f.worker,
		Concurrency:     f.concurrency,
		MaxPollInterval: f.maxPollInterval,
		DrainTimeout:    f.drainTimeout,
		PoisonCeiling:   f.poisonCeiling,
		Logger:          log,
		Metrics:         m,
	}
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
		Short: "Run the HTTP API and a processor in one process",
		Long: `serve runs the HTTP API (issue commands, read status and events, handle
poisoned commands, /healthz, /readyz, /metrics) and a processor in one process.

By default it uses the embedded store in ./cmdq-data, listens on
127.0.0.1:8080 and registers the demo handlers:
  demo.echo   {}                       completes at once (records its params as a step)
  demo.sleep  {"ms":N}                 sleeps N milliseconds
  demo.fail   {"times":K}              fails its first K attempts, then completes;
                                       K >= 5 (the poison ceiling) ends poisoned
  demo.steps  {"steps":N,"failAt":M}   records steps 1..N, fails once at step M,
                                       and the retry resumes from step M
Demo retries come after about a second.

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
	f.log.add(c)
	f.proc.add(c)
	c.Flags().StringVar(&f.addr, "addr", defaultAddr, "HTTP listen address host:port (port 0 picks a free port; the log says which)")
	c.Flags().StringVar(&f.tokens, "tokens", "", "bearer tokens and roles: token:role[+role],... with roles issuer, reader, operator (default none: no authentication, loopback only)")
	c.Flags().BoolVar(&f.insecure, "insecure", false, "allow a non-loopback --addr without --tokens (anyone who reaches the port may issue and discard commands)")
	c.Flags().Int64Var(&f.maxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "largest request body in bytes; larger ones get 413")
	c.Flags().StringVar(&f.allowedHosts, "allowed-hosts", "", "without --tokens: comma-separated host names besides loopback ones that requests may name in their Host header (\"*\" = any); others get 421 (DNS rebinding). Default none; with --insecure a non-wildcard --addr IP is added")
	c.Flags().StringVar(&f.corsOrigins, "cors-origins", "", "comma-separated web origins (scheme://host[:port]) whose browser pages may call the API (CORS); default none: only same-origin pages and non-browser clients")
	c.Flags().DurationVar(&f.reqTimeout, "request-timeout", api.DefaultRequestTimeout, "deadline of every HTTP request (at most 50s); storage that does not answer in time gets the client a 503 with Retry-After")
	c.Flags().DurationVar(&f.recovery, "recovery-delay", status.DefaultRecoveryDelay, "visibility delay of a recovery enqueue (a re-issue of a pending command, a retried enqueue, a repeated requeue) of a command type this server has no handler for: at least that type's lease (types with a handler here use their lease + 1s)")
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
	if f.recovery <= 0 || f.recovery > storage.MaxVisibility {
		return fmt.Errorf("--recovery-delay %s: must be above 0 and at most %s (give at least the lease of the command types this server has no handler for)", f.recovery, storage.MaxVisibility)
	}
	reg, closeReg, err := f.proc.registry()
	if err != nil {
		return err
	}
	defer func() { _ = closeReg() }()
	raw, err := f.store.open(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := raw.Close(); err != nil {
			log.Error().Err(err).Msg("cmdq serve: close store")
		}
	}()

	prom := prometheus.NewRegistry()
	prom.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := api.NewMetrics(prom)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	// Only registered types get their own label; others count as "other".
	metrics.LabelTypes(reg.Types()...)
	ns := &notifyStore{Store: metrics.InstrumentStore(raw)}
	st := ns.withCombiner()
	names := status.Names{Prefix: f.store.prefix}

	var proc *processor.Processor
	if len(reg.Types()) > 0 {
		proc, err = processor.New(st, reg, f.proc.config(f.store.prefix, log, metrics))
		if err != nil {
			return fmt.Errorf("processor: %w", err)
		}
		ns.notify = proc.Notify
	} else {
		log.Warn().Msg("cmdq serve: no handlers registered (--no-demo): serving the API only; commands stay pending until a processor with handlers runs")
	}
	// Recovery enqueues are delayed by the lease of the command's type
	// (docs/lifecycle.md, "Duplicate messages"); types without a handler
	// here by --recovery-delay.
	recoveryDelay := func(cmdType string) time.Duration {
		if _, ok := reg.Lookup(cmdType); ok && proc != nil {
			return proc.RecoveryDelay(cmdType)
		}
		return f.recovery
	}
	iss, err := commands.NewIssuer(st, commands.Options{Prefix: f.store.prefix, QueueFor: reg.QueueFor, RecoveryDelay: recoveryDelay})
	if err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	defer func() { _ = iss.Close() }() // before the store closes
	rd, err := status.OpenReader(ctx, st, names, status.Options{RecoveryDelay: recoveryDelay})
	if err != nil {
		return fmt.Errorf("open status tables: %w", describeStoreErr(err))
	}
	queues := reg.Queues()
	if len(queues) == 0 {
		queues = []string{handlers.DefaultQueue}
	}
	for _, qn := range queues {
		q, err := st.Queue(ctx, names.Queue(qn))
		if err != nil {
			return fmt.Errorf("open queue %s: %w", names.Queue(qn), describeStoreErr(err))
		}
		metrics.WatchQueue(q)
	}
	cfg := api.Config{
		Issuer: iss, Reader: rd, Tokens: tokens, MaxBodyBytes: f.maxBodyBytes,
		Metrics: metrics, Gatherer: prom, Logger: log, RequestTimeout: f.reqTimeout,
		CORSOrigins: splitList(f.corsOrigins), AllowedHosts: allowedHosts(f.addr, splitList(f.allowedHosts)),
	}
	if !f.proc.noDemo {
		cfg.Registry = reg
	}
	if proc != nil {
		cfg.Health = api.ProcessorHealth(proc)
		cfg.Ready = proc.CheckStorage
	} else {
		// No processor: readiness still follows storage.
		probe := processor.NewStorageProbe(func(ctx context.Context) (storage.Queue, error) {
			return st.Queue(ctx, names.Queue(queues[0]))
		}, 0, 0)
		cfg.Ready = probe.Check
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w (check --cors-origins, --allowed-hosts, --request-timeout)", err)
	}
	h, err := api.New(cfg)
	if err != nil {
		return fmt.Errorf("api: %w", err)
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

	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	procErr := make(chan error, 1)
	if proc != nil {
		go func() { procErr <- proc.Run(pctx) }()
	}
	if lo, _ := isLoopback(f.addr); !lo && len(tokens) == 0 && len(cfg.AllowedHosts) == 0 {
		log.Warn().Str("addr", f.addr).Msg("cmdq serve: without --tokens only loopback Host names are answered (others get 421); add the names clients use with --allowed-hosts")
	}
	ev := log.Info().Str("url", "http://"+ln.Addr().String()).Str("store", f.store.kind).Str("prefix", names.Prefix).
		Strs("handlers", reg.Types()).Bool("auth", len(tokens) > 0)
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
	case err := <-procErr:
		runErr = fmt.Errorf("processor stopped: %w", describeStoreErr(err))
		procErr <- nil
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
	if proc != nil {
		if err := <-procErr; err != nil && runErr == nil {
			runErr = fmt.Errorf("processor: %w", err)
		}
	}
	if runErr != nil {
		return runErr
	}
	log.Info().Msg("cmdq serve: stopped")
	return nil
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

// notifyStore wraps a store so that every successful enqueue wakes the
// in-process processor at once (issued, requeued and reconciled commands).
type notifyStore struct {
	storage.Store
	notify func(queue string)
}

// Queue returns the named queue, wrapped to notify on enqueue.
func (s *notifyStore) Queue(ctx context.Context, name string) (storage.Queue, error) {
	q, err := s.Store.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return notifyQueue{Queue: q, store: s}, nil
}

// withCombiner returns s, or, when the wrapped store implements
// storage.Combiner (the embedded store: one commit per issue and per
// completion), a view of s that implements it too.
func (s *notifyStore) withCombiner() storage.Store {
	if cb, ok := s.Store.(storage.Combiner); ok {
		return &notifyCombiner{notifyStore: s, cb: cb}
	}
	return s
}

type notifyCombiner struct {
	*notifyStore
	cb storage.Combiner
}

// BatchEnqueue writes and enqueues in one commit, then notifies the processor.
func (c *notifyCombiner) BatchEnqueue(ctx context.Context, table, partitionKey string, ops []storage.BatchOp, queue, text string, visibilityDelay, ttl time.Duration) ([]string, storage.Message, error) {
	etags, m, err := c.cb.BatchEnqueue(ctx, table, partitionKey, ops, queue, text, visibilityDelay, ttl)
	if err == nil && c.notify != nil {
		c.notify(queue)
	}
	return etags, m, err
}

// BatchDelete writes and deletes in one commit.
func (c *notifyCombiner) BatchDelete(ctx context.Context, table, partitionKey string, ops []storage.BatchOp, queue, id, popReceipt string) ([]string, error, error) {
	return c.cb.BatchDelete(ctx, table, partitionKey, ops, queue, id, popReceipt)
}

type notifyQueue struct {
	storage.Queue
	store *notifyStore
}

// Enqueue enqueues and then notifies the processor.
func (q notifyQueue) Enqueue(ctx context.Context, text string, visibilityDelay, ttl time.Duration) (storage.Message, error) {
	m, err := q.Queue.Enqueue(ctx, text, visibilityDelay, ttl)
	if err == nil && q.store.notify != nil {
		q.store.notify(q.Queue.Name())
	}
	return m, err
}

// workerFlags are worker's flags.
type workerFlags struct {
	store  storeFlags
	log    logFlags
	proc   procFlags
	runFor time.Duration
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
handler might not finish in time and leaves no message leased.

Without --run-for it runs until SIGINT or SIGTERM, then drains.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorker(cmd.Context(), cmd, &f)
		},
	}
	f.store.add(c)
	f.log.add(c)
	f.proc.add(c)
	c.Flags().DurationVar(&f.runFor, "run-for", 0, "process for at most this long, then exit 0 with a summary (0 = until SIGINT/SIGTERM)")
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
	reg, closeReg, err := f.proc.registry()
	if err != nil {
		return err
	}
	defer func() { _ = closeReg() }()
	if len(reg.Types()) == 0 {
		return errors.New("worker has no handlers: the binary's only handlers are the demo ones, which --no-demo turned off; " +
			"to run your own handlers, build a program with package processor (see examples/)")
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
	proc, err := processor.New(st, reg, f.proc.config(f.store.prefix, log, nil))
	if err != nil {
		return fmt.Errorf("processor: %w", err)
	}
	if f.runFor == 0 {
		log.Info().Str("store", f.store.kind).Strs("handlers", reg.Types()).Msg("cmdq worker: running until SIGINT/SIGTERM")
		if err := proc.Run(ctx); err != nil {
			return fmt.Errorf("processor: %w", describeStoreErr(err))
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
	sum, err := proc.RunFor(ctx, d)
	if err != nil {
		return fmt.Errorf("processor: %w", describeStoreErr(err))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "cmdq worker: processed %d (completed %d, failed %d, poisoned %d, released %d, interrupted %d) in %s; stopped: %s\n",
		sum.Processed, sum.Completed, sum.Failed, sum.Poisoned, sum.Released, sum.Interrupted,
		sum.Duration.Round(time.Millisecond), sum.StoppedBecause)
	return nil
}
