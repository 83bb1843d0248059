package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq/internal/bench"
)

func init() { extraCommands = append(extraCommands, newBenchCmd) }

// newBenchCmd builds `cmdq bench`.
func newBenchCmd() *cobra.Command {
	var cfg bench.Config
	var asJSON bool
	var maxOps, maxTrickleOps float64
	var scale bench.ScaleConfig
	var minRatio, maxSpread float64
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput, latency, storage operations per command, idle cost and memory",
		Long: `bench issues commands to a no-op handler (or one of --handler-duration),
processes them with the real processor and reports: commands issued and
processed per second, Issue → handler start latency at a steady rate, storage
operations per completed command by kind of call (burn-down, steady
in-process issue, 8 HTTP clients issuing through a real HTTP server at a
steady rate, first delivery with and without the fast path, and the
retention sweep that removes the run's commands once past retention),
idle storage operations per hour at --max-poll-interval, and peak RSS. See docs/performance.md for the method.

  cmdq bench                                  embedded store in a temporary file
  cmdq bench --store azure --baseline raw     Azurite (started from tools/azurite unless
                                              AZURE_STORAGE_CONNECTION_STRING is set),
                                              compared with a raw Azure SDK pipeline

Never point it at a production account: it creates queues and tables named
bench<random> and raw<random> (and deletes them at the end).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scale.Accounts > 0 {
				return runScale(cmd, cfg, scale, asJSON, minRatio, maxSpread)
			}
			if !asJSON {
				cfg.Progress = cmd.ErrOrStderr()
			}
			res, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				if err := json.NewEncoder(cmd.OutOrStdout()).Encode(res); err != nil {
					return err
				}
			} else {
				printBench(cmd.OutOrStdout(), res)
			}
			if maxOps > 0 && res.StorageOpsPerCommand > maxOps {
				return &exitError{code: 3, err: fmt.Errorf("bench: %.3f storage operations per completed command, over --max-ops-per-command %g", res.StorageOpsPerCommand, maxOps)}
			}
			if maxTrickleOps > 0 {
				if res.HTTPTrickle == nil {
					return &exitError{code: 3, err: fmt.Errorf("bench: --max-trickle-ops-per-command %g needs the HTTP trickle phase (--trickle-n must not be negative)", maxTrickleOps)}
				}
				if t := res.HTTPTrickle.CallsPerCommand.Total; t > maxTrickleOps {
					return &exitError{code: 3, err: fmt.Errorf("bench: %.3f storage operations per completed command in the HTTP trickle, over --max-trickle-ops-per-command %g", t, maxTrickleOps)}
				}
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&cfg.Store, "store", bench.StoreEmbedded, "storage: embedded (a temporary data directory, fsync on) or azure")
	fl.StringVar(&cfg.Path, "path", "", "embedded store file (default: a temporary file, removed afterwards)")
	fl.StringVar(&cfg.ConnectionString, "azure-connection-string", "", "Azure Storage connection string (default: $AZURE_STORAGE_CONNECTION_STRING, else Azurite started from tools/azurite)")
	fl.IntVarP(&cfg.N, "n", "n", 0, "commands to issue and process (default 20000 embedded, 2000 azure)")
	fl.IntVar(&cfg.Concurrency, "concurrency", bench.DefaultConcurrency, "handlers the processor runs at once")
	fl.IntVar(&cfg.Issuers, "issuers", bench.DefaultIssuers, "goroutines issuing in the issue phase")
	fl.IntVar(&cfg.BatchSize, "batch-size", 32, "messages per dequeue, 1..32")
	fl.IntVar(&cfg.NewBatchThreshold, "new-batch-threshold", 0, "processor's NewBatchThreshold: the most messages held beyond --concurrency, waiting for a handler (0 = batch size, -1 = none)")
	fl.DurationVar(&cfg.HandlerDuration, "handler-duration", 0, "how long each handler takes (0 = no-op)")
	fl.IntVar(&cfg.Rate, "rate", 0, "latency phase: commands issued per second (default 500 embedded, 50 azure)")
	fl.DurationVar(&cfg.LatencyDuration, "latency-duration", bench.DefaultLatencyDuration, "latency phase length (negative skips it)")
	fl.IntVar(&cfg.TrickleN, "trickle-n", 0, "HTTP trickle phase: commands issued through the HTTP API (default 2000 embedded, 320 azure; negative skips the phase)")
	fl.IntVar(&cfg.FirstDeliveryN, "first-delivery-n", 0, "first-delivery phases: commands burnt down with the fast path and with it off (default 256; negative skips them)")
	fl.IntVar(&cfg.TrickleClients, "trickle-clients", bench.DefaultTrickleClients, "HTTP trickle phase: concurrent HTTP clients")
	fl.IntVar(&cfg.TrickleRate, "trickle-rate", 0, "HTTP trickle phase: commands per second over all clients (default 500 embedded, 50 azure; negative: unpaced, each client issues as soon as answered)")
	fl.DurationVar(&cfg.MaxPollInterval, "max-poll-interval", 0, "the processor's MaxPollInterval, which the idle figure is for (default 1m)")
	fl.DurationVar(&cfg.IdleWindow, "idle-window", bench.DefaultIdleWindow, "idle phase: how long the scaled idle poller is watched (negative skips the phase)")
	fl.Float64Var(&cfg.IdleScale, "idle-scale", bench.DefaultIdleScale, "idle phase: poll intervals are divided by this")
	fl.StringVar(&cfg.Baseline, "baseline", "", `"raw": also run the minimal pipeline written against the Azure SDK (needs --store azure) and report the ratio`)
	fl.StringVar(&cfg.ProfileDir, "profile-dir", "", "write CPU profiles of the issue and process phases here (issue.pprof, process.pprof)")
	fl.DurationVar(&cfg.Timeout, "timeout", bench.DefaultTimeout, "limit of each phase")
	fl.Float64Var(&maxOps, "max-ops-per-command", 0, "fail (exit status 3) when storage operations per completed command in the burn-down exceed this (0 = no check; CI uses 4.1)")
	fl.Float64Var(&maxTrickleOps, "max-trickle-ops-per-command", 0, "fail (exit status 3) when storage operations per completed command in the HTTP trickle exceed this (0 = no check; CI uses 4.2)")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object instead of the summary")
	fl.IntVar(&scale.Accounts, "accounts", 0, "scale mode (--store azure, Azurite): compare one Azurite instance with one shard against this many instances (storage accounts) with --shards shards, interleaved --runs times each, fresh instances per burn-down of -n commands (docs/scaling.md); 0 = the normal run")
	fl.IntVar(&scale.Shards, "shards", 2, "scale mode: shards of the queue in the scaled setup")
	fl.IntVar(&scale.Runs, "runs", 3, "scale mode: burn-downs of each setup")
	fl.Float64Var(&minRatio, "min-scale-ratio", 0, "scale mode: fail (exit status 3) when the scaled median over the base median is below this (0 = no check)")
	fl.Float64Var(&maxSpread, "max-account-spread", 0, "scale mode: fail (exit status 3) when the accounts' call counts differ by more than this fraction of the largest (0 = no check)")
	c.AddCommand(newBenchTopologyCmd())
	return c
}

// newBenchTopologyCmd builds `cmdq bench topology`.
func newBenchTopologyCmd() *cobra.Command {
	var cfg bench.TopologyConfig
	var asJSON bool
	c := &cobra.Command{
		Use:   "topology",
		Short: "Measure the production shape: issue → start across processes, and a burst shared by workers",
		Long: `topology runs the production shape on Azure Storage (Azurite from
tools/azurite unless AZURE_STORAGE_CONNECTION_STRING or
--azure-connection-string is set): this process issues without a processor
(a web tier) and --workers cmdq worker processes (this binary) run the demo
handlers at their defaults. After --idle, it issues --singles commands one at a
time, each after a random pause of --min-spacing to --max-spacing, and reports
the time from each issue to its handler's start (p50, p99, max); then a burst
of --burst demo.sleep commands of --burst-sleep, with its time against the
ideal (burst × sleep / all slots) and each worker's share. --no-doorbell gives
the figure without wake-ups between processes. See docs/performance.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Binary = bin
			if !asJSON {
				cfg.Progress = cmd.ErrOrStderr()
			}
			res, err := bench.RunTopology(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "doorbell %v, %d workers × %d slots, idle %.0fs\n", res.Doorbell, res.Workers, res.Slots, res.IdleSeconds)
			fmt.Fprintf(cmd.OutOrStdout(), "  issue → start  p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d singles (first after the idle time: %.1f ms)\n",
				res.StartP50MS, res.StartP99MS, res.StartMaxMS, res.Singles, res.FirstStartMS)
			fmt.Fprintf(cmd.OutOrStdout(), "  issuer         %d storage calls for %d singles (%d of them queries: the processors' list)\n", res.IssuerCalls, res.Singles, res.IssuerQueries)
			if res.Burst > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "  burst          %d in %.1f s, ideal %.1f s (%.2f×)\n", res.Burst, res.BurstSeconds, res.IdealSeconds, res.BurstRatio)
				for _, sh := range res.BurstShares {
					fmt.Fprintf(cmd.OutOrStdout(), "    %-12s %4d (%.0f %%)\n", sh.Worker, sh.Commands, 100*sh.Fraction)
				}
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&cfg.ConnectionString, "azure-connection-string", "", "Azure Storage connection string (default: $AZURE_STORAGE_CONNECTION_STRING, else Azurite started from tools/azurite)")
	fl.IntVar(&cfg.Workers, "workers", bench.DefaultTopologyWorkers, "cmdq worker processes")
	fl.IntVar(&cfg.Slots, "slots", bench.DefaultTopologySlots, "each worker's --concurrency")
	fl.DurationVar(&cfg.Idle, "idle", bench.DefaultTopologyIdle, "how long the workers idle before the first issue")
	fl.IntVar(&cfg.Singles, "singles", bench.DefaultTopologySingles, "commands issued one at a time")
	fl.DurationVar(&cfg.MinSpacing, "min-spacing", time.Second, "shortest pause before a single")
	fl.DurationVar(&cfg.MaxSpacing, "max-spacing", 10*time.Second, "longest pause before a single")
	fl.IntVar(&cfg.Burst, "burst", bench.DefaultTopologyBurst, "commands in the burst (negative: no burst)")
	fl.DurationVar(&cfg.BurstSleep, "burst-sleep", bench.DefaultTopologySleep, "each burst command's handler time")
	fl.BoolVar(&cfg.NoDoorbell, "no-doorbell", false, "workers and issuer without wake-ups between processes: the figure without the doorbell")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object instead of the summary")
	return c
}

// printBench writes the human summary of a run.
func printBench(w io.Writer, r bench.Result) {
	fmt.Fprintf(w, "store %s: %d commands, %d issuers, concurrency %d, batch %d, handler %gms\n",
		r.Store, r.N, r.Issuers, r.Concurrency, r.BatchSize, r.HandlerDurationMS)
	fmt.Fprintf(w, "  issued           %10.0f commands/s\n", r.IssuedPerS)
	fmt.Fprintf(w, "  processed        %10.0f commands/s (to completed, message deleted)\n", r.ProcessedPerS)
	if r.BaselineProcessedPerS > 0 {
		fmt.Fprintf(w, "  raw SDK baseline %10.0f commands/s processed (%.0f issued); cmdq/raw = %.2f×\n",
			r.BaselineProcessedPerS, r.BaselineIssuedPerS, r.Ratio)
	}
	if r.LatencySamples > 0 {
		fmt.Fprintf(w, "  latency          p50 %.2f ms, p99 %.2f ms (Issue → handler start, %d/s, %d samples)\n",
			r.LatencyP50MS, r.LatencyP99MS, r.LatencyRate, r.LatencySamples)
	}
	fmt.Fprintf(w, "  storage ops      %.3f per completed command (issue %.3f + process %.3f)\n",
		r.StorageOpsPerCommand, r.IssueOpsPerCommand, r.ProcessOpsPerCommand)
	printCalls(w, "burn-down", r.BurnDown)
	if r.SteadyCalls != nil {
		printCalls(w, fmt.Sprintf("in-process %d/s", r.LatencyRate), *r.SteadyCalls)
	}
	if t := r.HTTPTrickle; t != nil {
		rate := "unpaced"
		if t.RatePerS > 0 {
			rate = fmt.Sprintf("%d/s", t.RatePerS)
		}
		printCalls(w, fmt.Sprintf("HTTP %d clients %s", t.Clients, rate), t.CallsPerCommand)
		fmt.Fprintf(w, "    (%d commands, %.0f issued/s, %.1f commands per dequeue; HTTP request → handler start p50 %.2f ms, p99 %.2f ms)\n",
			t.Completed, t.IssuedPerS, t.CommandsPerDequeue, t.LatencyP50MS, t.LatencyP99MS)
	}
	if fd := r.FirstDelivery; fd != nil {
		printCalls(w, fmt.Sprintf("first delivery, fast %.0f%%", 100*fd.FastPathShare), fd.FastPath)
		printCalls(w, "first delivery, fallback", fd.Fallback)
		fmt.Fprintf(w, "    (burn-down deliveries on the fast path: %.0f%%)\n", 100*r.BurnDownFastPath)
	}
	if rt := r.Retention; rt != nil {
		printCalls(w, "retention, per command", rt.CallsPerCommand)
		printCalls(w, "retention, whole sweep", rt.Calls)
		gone := "gone"
		if !rt.DayTableGone {
			gone = "NOT gone"
		}
		fmt.Fprintf(w, "    (one sweep, clock %gh ahead: %.0f calls for %d commands in %d day table(s), %d dropped; day table %s)\n",
			rt.ClockAheadH, rt.Calls.Total, rt.Commands, rt.DayTables, rt.Dropped, gone)
	}
	if r.CommitsPerCommand > 0 {
		fmt.Fprintf(w, "  embedded log syncs %.3f per command (each one fdatasync for a group of writes)\n", r.CommitsPerCommand)
	}
	if r.IdleOpsPerHour > 0 {
		fmt.Fprintf(w, "  idle             %.1f ops/hour per queue at max poll interval %gs (polls %.1f + reconciler %.1f); woken in %.2f ms\n",
			r.IdleOpsPerHour, r.MaxPollIntervalS, r.IdlePollOpsPerHour, r.IdleReconcileOpsPerHour, r.IdleWakeLatencyMS)
		if r.IdlePerHour != nil {
			printCalls(w, "idle, per hour", *r.IdlePerHour)
		}
		fmt.Fprintf(w, "  heartbeat        %.1f ops/hour per running processor (not per queue: one upsert a minute, one clean-up query an hour)\n", r.IdleHeartbeatOpsPerHour)
		fmt.Fprintf(w, "  reconciler pass  %d ops on the bench's loaded tables\n", r.ReconcileOpsPerPassLoaded)
	}
	fmt.Fprintf(w, "  max RSS          %.1f MiB (run); while draining: peak %.1f MiB, of which anonymous %.1f MiB\n", r.MaxRSSMB, r.ProcessRSSPeakMB, r.ProcessRSSAnonPeakMB)
}

// printCalls writes one breakdown line of calls per command (or per hour).
func printCalls(w io.Writer, what string, c bench.Calls) {
	fmt.Fprintf(w, "    %-24s %6.3f = queue: enqueue %.3f, dequeue %.3f, delete %.3f, update %.3f, other %.3f; table: batch %.3f, point read %.3f, query %.3f, other %.3f, list %.3f, drop %.3f\n",
		what, c.Total, c.QueueEnqueue, c.QueueDequeue, c.QueueDelete, c.QueueUpdate, c.QueueOther, c.TableBatch, c.TablePointRead, c.TableQuery, c.TableOther, c.TableList, c.TableDrop)
}

// runScale runs bench's scale mode (bench.RunScale).
func runScale(cmd *cobra.Command, cfg bench.Config, scale bench.ScaleConfig, asJSON bool, minRatio, maxSpread float64) error {
	if cfg.Store != bench.StoreAzure {
		return fmt.Errorf("--accounts needs --store azure: it starts Azurite instances as storage accounts")
	}
	if cfg.ConnectionString != "" {
		return fmt.Errorf("--accounts starts its own Azurite instances; leave --azure-connection-string out")
	}
	scale.N, scale.Concurrency, scale.Issuers, scale.Timeout = cfg.N, cfg.Concurrency, cfg.Issuers, cfg.Timeout
	if !asJSON {
		scale.Progress = cmd.ErrOrStderr()
	}
	res, err := bench.RunScale(cmd.Context(), scale)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if asJSON {
		if err := json.NewEncoder(w).Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "scale: %d commands per burn-down, %d runs each, interleaved\n", res.N, len(res.Runs)/2)
		fmt.Fprintf(w, "  1 account, 1 shard        processed min %.0f / median %.0f / max %.0f commands/s\n", res.Base[0], res.Base[1], res.Base[2])
		fmt.Fprintf(w, "  %d accounts, %d shards each processed min %.0f / median %.0f / max %.0f commands/s\n", res.Accounts, res.Shards, res.Scaled[0], res.Scaled[1], res.Scaled[2])
		fmt.Fprintf(w, "  ratio of medians %.2f× (least favourable pairing %.2f×); accounts' call counts differ by at most %.1f%%\n", res.Ratio, res.RatioMin, 100*res.MaxAccountSpread)
	}
	if minRatio > 0 && res.Ratio < minRatio {
		return &exitError{code: 3, err: fmt.Errorf("bench: scaled/base = %.2f, under --min-scale-ratio %g", res.Ratio, minRatio)}
	}
	if maxSpread > 0 && res.MaxAccountSpread > maxSpread {
		return &exitError{code: 3, err: fmt.Errorf("bench: accounts' call counts differ by %.1f%%, over --max-account-spread %g", 100*res.MaxAccountSpread, maxSpread)}
	}
	return nil
}
