package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cmdq-dev/cmdq/internal/azurite/emulator"
	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/azure"
	"github.com/cmdq-dev/cmdq/storage/multi"
)

// ScaleConfig configures RunScale: the scale-out comparison of
// docs/scaling.md. The zero value is the defaults named on each field.
type ScaleConfig struct {
	// N is the number of commands each burn-down issues and processes.
	// Default 2,000.
	N int
	// Runs is how many times each setup runs, interleaved (base, scaled,
	// scaled, base, …). Default 3.
	Runs int
	// Accounts is the number of storage accounts (Azurite instances) of
	// the scaled setup. Default 2.
	Accounts int
	// Shards is the number of shards of the queue in the scaled setup.
	// Default 2.
	Shards int
	// Concurrency is the processor's handlers. Default 100.
	Concurrency int
	// Issuers is the number of goroutines issuing. Default 16.
	Issuers int
	// Timeout bounds each phase. Default 5 minutes.
	Timeout time.Duration
	// Progress, if set, receives one line per phase.
	Progress io.Writer
}

// ScaleRun is one burn-down of RunScale.
type ScaleRun struct {
	// Setup is "base" (one account, one shard) or "scaled".
	Setup string `json:"setup"`
	// IssuedPerS and ProcessedPerS are as in Result.
	IssuedPerS    float64 `json:"issued_per_s"`
	ProcessedPerS float64 `json:"processed_per_s"`
	// CallsPerCommand is every storage call of the issue and the
	// burn-down, per command.
	CallsPerCommand float64 `json:"calls_per_command"`
	// AccountCalls are the calls each account got (issue and burn-down).
	AccountCalls []int64 `json:"account_calls"`
	// AccountSpread is (max - min) / max of AccountCalls (0 for one).
	AccountSpread float64 `json:"account_spread"`
}

// ScaleResult is RunScale's outcome.
type ScaleResult struct {
	N        int `json:"n"`
	Accounts int `json:"accounts"`
	Shards   int `json:"shards"`
	// Runs lists every burn-down in the order run.
	Runs []ScaleRun `json:"runs"`
	// Base and Scaled are processed_per_s of each setup: min, median, max.
	Base   [3]float64 `json:"base_processed_per_s"`
	Scaled [3]float64 `json:"scaled_processed_per_s"`
	// Ratio is the scaled median over the base median; RatioMin the
	// scaled minimum over the base maximum (the least favourable pairing).
	Ratio    float64 `json:"ratio"`
	RatioMin float64 `json:"ratio_min"`
	// MaxAccountSpread is the largest AccountSpread of the scaled runs.
	MaxAccountSpread float64 `json:"max_account_spread"`
}

// RunScale compares the throughput of one Azurite instance (one account)
// with one shard against Accounts instances (accounts) with Shards shards
// each, in the same run: each burn-down gets fresh Azurite instances (one
// or Accounts), issues N commands and drains them with the real
// processor; the setups alternate, Runs times each.
func RunScale(ctx context.Context, cfg ScaleConfig) (ScaleResult, error) {
	cfg.N = cmpOr(cfg.N, 2000)
	cfg.Runs = cmpOr(cfg.Runs, 3)
	cfg.Accounts = cmpOr(cfg.Accounts, 2)
	cfg.Shards = cmpOr(cfg.Shards, 2)
	cfg.Concurrency = cmpOr(cfg.Concurrency, DefaultConcurrency)
	cfg.Issuers = cmpOr(cfg.Issuers, DefaultIssuers)
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.N < 1 || cfg.Runs < 1 || cfg.Accounts < 1 || cfg.Shards < 1 || cfg.Shards > 64 {
		return ScaleResult{}, errors.New("bench: scale: N, runs, accounts and shards must be at least 1 (shards at most 64)")
	}
	logf := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "bench: "+format+"\n", a...)
		}
	}
	res := ScaleResult{N: cfg.N, Accounts: cfg.Accounts, Shards: cfg.Shards}
	var base, scaled []float64
	for r := range cfg.Runs {
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, sc := range order {
			accounts, shards, setup := 1, 1, "base"
			if sc {
				accounts, shards, setup = cfg.Accounts, cfg.Shards, "scaled"
			}
			logf("scale run %d/%d, %s: %d account(s), %d shard(s), %d commands", r+1, cfg.Runs, setup, accounts, shards, cfg.N)
			run, err := scaleOnce(ctx, cfg, accounts, shards)
			if err != nil {
				return res, fmt.Errorf("bench: scale run %d (%s): %w", r+1, setup, err)
			}
			run.Setup = setup
			logf("  %s: issued %.0f/s, processed %.0f/s, %.3f calls per command, account calls %v (spread %.1f%%)",
				setup, run.IssuedPerS, run.ProcessedPerS, run.CallsPerCommand, run.AccountCalls, 100*run.AccountSpread)
			res.Runs = append(res.Runs, run)
			if sc {
				scaled = append(scaled, run.ProcessedPerS)
				res.MaxAccountSpread = max(res.MaxAccountSpread, run.AccountSpread)
			} else {
				base = append(base, run.ProcessedPerS)
			}
		}
	}
	res.Base, res.Scaled = minMedMax(base), minMedMax(scaled)
	res.Ratio = res.Scaled[1] / res.Base[1]
	res.RatioMin = res.Scaled[0] / res.Base[2]
	return res, nil
}

func cmpOr(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func minMedMax(v []float64) [3]float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return [3]float64{s[0], s[len(s)/2], s[len(s)-1]}
}

// scaleOnce runs one burn-down on fresh Azurite instances.
func scaleOnce(ctx context.Context, cfg ScaleConfig, accounts, shards int) (ScaleRun, error) {
	var run ScaleRun
	var counters []*Counter
	var members []multi.Member
	defer func() {
		for _, m := range members {
			_ = m.Store.Close()
		}
	}()
	for i := range accounts {
		a, err := startAzurite()
		if err != nil {
			return run, err
		}
		defer a.Stop()
		st, err := azure.Open(ctx, azure.Config{ConnectionString: emulator.ExpandConnectionString(a.ConnectionString)})
		if err != nil {
			return run, fmt.Errorf("open account %d: %w", i, err)
		}
		c := NewCounter(st)
		counters = append(counters, c)
		members = append(members, multi.Member{Name: fmt.Sprintf("account %d", i), Store: c.Counted()})
	}
	var st storage.Store = members[0].Store
	if accounts > 1 {
		m, err := multi.New(members, multi.Options{})
		if err != nil {
			return run, err
		}
		st = m
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "scale" + hex.EncodeToString(b[:])
	sh := map[string]int{model.DefaultQueue: shards}
	iss, err := issuer.NewIssuer(st, issuer.IssuerOptions{Prefix: prefix, Shards: sh})
	if err != nil {
		return run, err
	}
	// Create the queues and tables before timing (one warm-up command,
	// processed with the others).
	if _, err := iss.Issue(ctx, benchCmd{Seq: -1}); err != nil {
		return run, fmt.Errorf("warm-up issue: %w", err)
	}
	total := func() (n int64, per []int64) {
		for _, c := range counters {
			per = append(per, c.Total())
			n += c.Total()
		}
		return n, per
	}
	calls0, per0 := total()
	elapsed, err := issueAll(ctx, iss, cfg.N, cfg.Issuers, cfg.Timeout)
	if err != nil {
		return run, err
	}
	run.IssuedPerS = float64(cfg.N) / elapsed.Seconds()
	var completed atomic.Int64
	reg := registry.NewRegistry()
	if err := registry.Register(reg, func(context.Context, benchCmd, *registry.Attempt) error { return nil }, registry.Options{}); err != nil {
		return run, err
	}
	p, err := processor.New(st, reg, processor.Config{Prefix: prefix, Shards: sh, Worker: "bench", Concurrency: cfg.Concurrency,
		ReconcileInterval: model.NoReconcile, Observer: metrics{completed: &completed}})
	if err != nil {
		return run, err
	}
	n := int64(cfg.N + 1)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- p.Run(pctx) }()
	err = waitFor(ctx, cfg.Timeout, "process every command", func() bool {
		return completed.Load() >= n && p.Health().InFlight == 0
	})
	elapsed = time.Since(began)
	cancel()
	if perr := <-done; err == nil && perr != nil && !errors.Is(perr, context.Canceled) {
		err = perr
	}
	if err != nil {
		return run, fmt.Errorf("%w (%d of %d completed)", err, completed.Load(), n)
	}
	run.ProcessedPerS = float64(n) / elapsed.Seconds()
	calls1, per1 := total()
	run.CallsPerCommand = float64(calls1-calls0) / float64(cfg.N)
	hi, lo := int64(0), int64(-1)
	for i := range per1 {
		d := per1[i] - per0[i]
		run.AccountCalls = append(run.AccountCalls, d)
		hi = max(hi, d)
		if lo < 0 || d < lo {
			lo = d
		}
	}
	if hi > 0 {
		run.AccountSpread = float64(hi-lo) / float64(hi)
	}
	return run, nil
}
