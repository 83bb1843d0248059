package bench

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/instrument"
)

// The topology benchmark: the production shape, measured from outside. One
// issuing process without a processor (this one, a cmdq.Client that is
// never started: a web tier) and Workers `cmdq worker` processes at their
// defaults on one Azure Storage account (Azurite), idle for Idle first.
// It reports the time from an issue to the start of its handler, over
// commands issued one at a time at random spacings (so the workers' poll
// backoff is anywhere in its range), and a burst: how long Burst commands
// of BurstSleep take on the workers, and each worker's share.

// Defaults of TopologyConfig.
const (
	DefaultTopologyWorkers = 2
	DefaultTopologySlots   = 4
	DefaultTopologyIdle    = 2 * time.Minute
	DefaultTopologySingles = 30
	DefaultTopologyBurst   = 160
	DefaultTopologySleep   = 500 * time.Millisecond
)

// TopologyConfig configures RunTopology; zero fields take the defaults.
type TopologyConfig struct {
	// ConnectionString is the Azure Storage account (default:
	// $AZURE_STORAGE_CONNECTION_STRING, else Azurite started from
	// tools/azurite).
	ConnectionString string
	// Binary is the cmdq binary the workers run (required: the caller's
	// os.Executable()).
	Binary string
	// Workers is the number of `cmdq worker` processes (default 2), each
	// with Slots handler slots (--concurrency, default 4).
	Workers, Slots int
	// Idle is how long the workers idle before the first issue (default 2
	// minutes): their poll backoff reaches its top, as in production.
	Idle time.Duration
	// Singles is how many commands are issued one at a time (default 30),
	// each after a random pause of MinSpacing to MaxSpacing (default 1 to
	// 10 s).
	Singles                int
	MinSpacing, MaxSpacing time.Duration
	// Burst is how many commands of BurstSleep (default 160 of 500 ms)
	// are issued at once after the singles; 0 uses the default, negative
	// skips the burst.
	Burst      int
	BurstSleep time.Duration
	// NoDoorbell runs the workers and the issuer without wake-ups between
	// processes (--no-doorbell): the figure without the doorbell.
	NoDoorbell bool
	// Progress, if set, receives a line per phase.
	Progress io.Writer
}

// TopologyResult is what RunTopology measured.
type TopologyResult struct {
	Doorbell      bool    `json:"doorbell"`
	Workers       int     `json:"workers"`
	Slots         int     `json:"slots"`
	IdleSeconds   float64 `json:"idleSeconds"`
	Singles       int     `json:"singles"`
	StartP50MS    float64 `json:"startP50Ms"`
	StartP99MS    float64 `json:"startP99Ms"`
	StartMaxMS    float64 `json:"startMaxMs"`
	FirstStartMS  float64 `json:"firstStartMs"` // the first command, after the idle time
	Burst         int     `json:"burst"`
	BurstSeconds  float64 `json:"burstSeconds"`
	IdealSeconds  float64 `json:"idealSeconds"`
	BurstRatio    float64 `json:"burstRatio"` // BurstSeconds / IdealSeconds
	BurstShares   []Share `json:"burstShares"`
	IssuerCalls   int     `json:"issuerCalls"`   // the issuing process's storage calls over the singles
	IssuerQueries int     `json:"issuerQueries"` // of which queries (the processors' list)
}

// Share is one worker's part of the burst.
type Share struct {
	Worker   string  `json:"worker"`
	Commands int     `json:"commands"`
	Fraction float64 `json:"fraction"`
}

// RunTopology runs the topology benchmark (see the package comment above).
func RunTopology(ctx context.Context, cfg TopologyConfig) (TopologyResult, error) {
	if cfg.Binary == "" {
		return TopologyResult{}, errors.New("bench: the topology benchmark needs the cmdq binary to start workers with")
	}
	cfg.Workers = cmp.Or(cfg.Workers, DefaultTopologyWorkers)
	cfg.Slots = cmp.Or(cfg.Slots, DefaultTopologySlots)
	cfg.Idle = cmp.Or(cfg.Idle, DefaultTopologyIdle)
	cfg.Singles = cmp.Or(cfg.Singles, DefaultTopologySingles)
	cfg.MinSpacing = cmp.Or(cfg.MinSpacing, time.Second)
	cfg.MaxSpacing = max(cmp.Or(cfg.MaxSpacing, 10*time.Second), cfg.MinSpacing)
	cfg.Burst = cmp.Or(cfg.Burst, DefaultTopologyBurst)
	cfg.BurstSleep = cmp.Or(cfg.BurstSleep, DefaultTopologySleep)
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "topology: "+format+"\n", args...)
		}
	}
	conn := cmp.Or(cfg.ConnectionString, os.Getenv(azure.EnvConnectionString))
	if conn == "" {
		a, err := startAzurite()
		if err != nil {
			return TopologyResult{}, err
		}
		defer a.Stop()
		conn = a.ConnectionString
	}
	raw, err := azure.Open(ctx, azure.Config{ConnectionString: conn})
	if err != nil {
		return TopologyResult{}, fmt.Errorf("bench: %w", err)
	}
	defer raw.Close()
	counted := newCallCounter(raw)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "topo" + hex.EncodeToString(b[:])
	res := TopologyResult{Doorbell: !cfg.NoDoorbell, Workers: cfg.Workers, Slots: cfg.Slots, IdleSeconds: cfg.Idle.Seconds(), Singles: cfg.Singles}

	// The issuer only issues, on a counted store: its calls are what an
	// issuing process pays. The reader follows the commands (Wait,
	// Events) for the measure, on the store uncounted.
	issuer, err := cmdq.New(counted.Store, cmdq.Config{Prefix: prefix, Doorbell: cmdq.Doorbell{Off: cfg.NoDoorbell}})
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	reader, err := cmdq.New(raw, cmdq.Config{Prefix: prefix, Doorbell: cmdq.Doorbell{Off: true}})
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = reader.DeleteStorage(dctx)
	}()
	// The tables and the queue exist before the workers start (as in a
	// deployment): a worker's start then costs nothing of the measure.
	if _, err := issuer.StorageQueue(ctx, cmdq.DefaultQueue); err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}

	workers := make([]*topologyWorker, cfg.Workers)
	for i := range workers {
		w, err := startTopologyWorker(ctx, cfg, conn, prefix, fmt.Sprintf("topo-w%d", i+1))
		if err != nil {
			return res, err
		}
		defer w.stop()
		workers[i] = w
	}
	for _, w := range workers {
		if err := w.ready(ctx); err != nil {
			return res, err
		}
	}
	progress("%d workers (%d slots each, doorbell %v) idle for %s", cfg.Workers, cfg.Slots, !cfg.NoDoorbell, cfg.Idle)
	if err := sleepCtx(ctx, cfg.Idle); err != nil {
		return res, err
	}

	// Singles: one at a time, a random pause before each.
	counted.reset()
	rnd := mrand.New(mrand.NewPCG(1, 2))
	starts := make([]float64, 0, cfg.Singles)
	for i := range cfg.Singles {
		if i > 0 {
			pause := cfg.MinSpacing + time.Duration(rnd.Int64N(int64(cfg.MaxSpacing-cfg.MinSpacing)+1))
			if err := sleepCtx(ctx, pause); err != nil {
				return res, err
			}
		}
		ms, err := issueAndStart(ctx, issuer, reader, demoEchoCmd{N: i})
		if err != nil {
			return res, err
		}
		starts = append(starts, ms)
		if i == 0 {
			res.FirstStartMS = ms
		}
	}
	res.IssuerCalls, res.IssuerQueries = counted.total(), counted.queries()
	sorted := slices.Clone(starts)
	slices.Sort(sorted)
	res.StartP50MS, res.StartP99MS, res.StartMaxMS = pct(sorted, 0.50), pct(sorted, 0.99), sorted[len(sorted)-1]
	progress("issue → start over %d singles: p50 %.1f ms, p99 %.1f ms, max %.1f ms (first, after the idle time: %.1f ms)",
		len(starts), res.StartP50MS, res.StartP99MS, res.StartMaxMS, res.FirstStartMS)

	if cfg.Burst > 0 {
		if err := runBurst(ctx, issuer, reader, cfg, &res); err != nil {
			return res, err
		}
		progress("burst of %d × %s: %.1f s (ideal %.1f s, %.2f×); shares %v", cfg.Burst, cfg.BurstSleep, res.BurstSeconds, res.IdealSeconds, res.BurstRatio, res.BurstShares)
	}
	return res, nil
}

// demoEchoCmd and demoSleepCmd are the workers' demo types (cmd/cmdq's
// demo handlers), issued by name.
type demoEchoCmd struct {
	N int `json:"n"`
}

func (demoEchoCmd) CommandType() string { return "demo.echo" }

type demoSleepCmd struct {
	MS int64 `json:"ms"`
}

func (demoSleepCmd) CommandType() string { return "demo.sleep" }

// issueAndStart issues cmd, waits for it to complete and returns the time
// from the issue call to its handler's start (its started event), in ms.
func issueAndStart(ctx context.Context, c, reader *cmdq.Client, cmd cmdq.Command) (float64, error) {
	t0 := time.Now()
	r, err := c.Issue(ctx, cmd)
	if err != nil {
		return 0, fmt.Errorf("bench: issue: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if st, err := reader.Wait(wctx, r.ID); err != nil || st.State != cmdq.StateCompleted {
		return 0, fmt.Errorf("bench: command %s ended %s: %v", r.ID, st.State, err)
	}
	started, _, err := startedBy(ctx, reader, r.ID)
	if err != nil {
		return 0, err
	}
	return float64(started.Sub(t0).Microseconds()) / 1000, nil
}

// startedBy returns when command id's (last) attempt started and which
// worker ran it.
func startedBy(ctx context.Context, c *cmdq.Client, id string) (time.Time, string, error) {
	evs, err := c.Events(ctx, id)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("bench: events of %s: %w", id, err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == cmdq.EventStarted {
			return evs[i].Time, evs[i].Worker, nil
		}
	}
	return time.Time{}, "", fmt.Errorf("bench: command %s has no started event", id)
}

// runBurst issues cfg.Burst sleeps at once (8 goroutines) and measures
// until the last completes.
func runBurst(ctx context.Context, c, reader *cmdq.Client, cfg TopologyConfig, res *TopologyResult) error {
	ids := make([]string, cfg.Burst)
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < cfg.Burst; i += 8 {
				r, err := c.Issue(ctx, demoSleepCmd{MS: cfg.BurstSleep.Milliseconds()})
				if err != nil {
					errs <- err
					return
				}
				ids[i] = r.ID
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("bench: burst issue: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	last := t0
	count := map[string]int{}
	for _, id := range ids {
		st, err := reader.Wait(wctx, id)
		if err != nil || st.State != cmdq.StateCompleted {
			return fmt.Errorf("bench: burst command %s ended %s: %v", id, st.State, err)
		}
		if st.UpdatedAt.After(last) {
			last = st.UpdatedAt
		}
		_, worker, err := startedBy(ctx, reader, id)
		if err != nil {
			return err
		}
		count[worker]++
	}
	res.Burst = cfg.Burst
	res.BurstSeconds = last.Sub(t0).Seconds()
	res.IdealSeconds = float64(cfg.Burst) * cfg.BurstSleep.Seconds() / float64(cfg.Workers*cfg.Slots)
	res.BurstRatio = res.BurstSeconds / res.IdealSeconds
	for w := range count {
		res.BurstShares = append(res.BurstShares, Share{Worker: w, Commands: count[w], Fraction: float64(count[w]) / float64(cfg.Burst)})
	}
	slices.SortFunc(res.BurstShares, func(a, b Share) int { return strings.Compare(a.Worker, b.Worker) })
	return nil
}

// pct returns the p-th quantile of sorted values (nearest rank).
func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// topologyWorker is one `cmdq worker` process.
type topologyWorker struct {
	cmd    *exec.Cmd
	name   string
	done   chan error
	readyC chan struct{}
}

// startTopologyWorker starts `cmdq worker` on the account at its defaults
// but for its slots and name (and --no-doorbell for the figure without).
func startTopologyWorker(ctx context.Context, cfg TopologyConfig, conn, prefix, name string) (*topologyWorker, error) {
	args := []string{"worker", "--store", "azure", "--azure-connection-string", conn, "--prefix", prefix,
		"--concurrency", strconv.Itoa(cfg.Slots), "--worker-id", name, "--log-format", "json"}
	if cfg.NoDoorbell {
		args = append(args, "--no-doorbell")
	}
	cmd := exec.CommandContext(ctx, cfg.Binary, args...)
	cmd.Env = append(os.Environ(), "CMDQ_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start worker: %w", err)
	}
	w := &topologyWorker{cmd: cmd, name: name, done: make(chan error, 1), readyC: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var once sync.Once
		for sc.Scan() {
			var line struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && strings.Contains(line.Message, "running until") {
				once.Do(func() { close(w.readyC) })
			}
		}
		w.done <- cmd.Wait()
	}()
	return w, nil
}

// ready waits until the worker says it runs.
func (w *topologyWorker) ready(ctx context.Context) error {
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-w.readyC:
		return nil
	case err := <-w.done:
		return fmt.Errorf("bench: worker %s exited before it ran: %v", w.name, err)
	case <-t.C:
		return fmt.Errorf("bench: worker %s did not start within a minute", w.name)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *topologyWorker) stop() {
	_ = w.cmd.Process.Signal(os.Interrupt)
	select {
	case <-w.done:
	case <-time.After(40 * time.Second):
		_ = w.cmd.Process.Kill()
	}
}

// callCounter counts a store's calls (queries apart): Store is the
// wrapped store (an instrument wrapper, which answers storage.Secret and
// storage.Exclusive for the store it wraps).
type callCounter struct {
	Store storage.Store
	mu    sync.Mutex
	calls int
	query int
}

func newCallCounter(st storage.Store) *callCounter {
	c := &callCounter{}
	c.Store = instrument.Wrap(st, instrument.Hooks{Before: func(op instrument.Op) error {
		c.mu.Lock()
		c.calls++
		if op == instrument.TableQuery {
			c.query++
		}
		c.mu.Unlock()
		return nil
	}})
	return c
}

func (c *callCounter) reset() {
	c.mu.Lock()
	c.calls, c.query = 0, 0
	c.mu.Unlock()
}

func (c *callCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func (c *callCounter) queries() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.query
}
