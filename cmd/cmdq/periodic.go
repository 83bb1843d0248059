package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
)

// Periodic commands: `cmdq periodic ls`, and serve's and worker's
// --periodic NAME;SPEC;TYPE[;PARAMS].

func init() { extraCommands = append(extraCommands, newPeriodicCmd) }

func (b httpBackend) Periodic(ctx context.Context) ([]cmdq.PeriodicInfo, error) {
	ps, err := b.c.Periodic(ctx)
	return ps, b.wrap(err)
}

func (b *storeBackend) Periodic(ctx context.Context) ([]cmdq.PeriodicInfo, error) {
	return b.c.ListPeriodic(ctx)
}

func (b httpBackend) GetPeriodic(ctx context.Context, name string, ticks int) (cmdq.PeriodicInfo, error) {
	info, err := b.c.GetPeriodic(ctx, name, ticks)
	return info, b.wrap(err)
}

func (b *storeBackend) GetPeriodic(ctx context.Context, name string, ticks int) (cmdq.PeriodicInfo, error) {
	return b.c.GetPeriodic(ctx, name, ticks)
}

func (b httpBackend) TriggerPeriodic(ctx context.Context, name string, at time.Time) (cmdq.TickInfo, error) {
	tick, err := b.c.TriggerPeriodic(ctx, name, at)
	return tick, b.wrap(err)
}

func (b *storeBackend) TriggerPeriodic(ctx context.Context, name string, at time.Time) (cmdq.TickInfo, error) {
	return b.c.TriggerPeriodicAt(ctx, name, b.by, at)
}

func newPeriodicCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "periodic",
		Short: "List periodic schedules with their last and next tick",
		Long: `periodic lists the periodic schedules: those every process that runs one
stored when it started (cmdq.Client.Periodic in your program, or serve and
worker with --periodic), and those the server's own process registers.
` + remoteHelp,
	}
	c.AddCommand(newPeriodicLsCmd(), newPeriodicShowCmd(), newPeriodicTriggerCmd())
	return c
}

func newPeriodicShowCmd() *cobra.Command {
	var (
		f      remoteFlags
		asJSON bool
		ticks  int
	)
	c := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a periodic schedule with its latest ticks and their commands' states",
		Long: `show prints a periodic schedule (its spec, command type, queue, next tick)
and its latest ticks of the spec at or before now, newest first, each with
its command's ID and state, or "missed" when no command exists for it (no
process ran the schedule then). Triggered ticks are not among them (their
times are not the spec's); ` + "`cmdq ls --correlation-id periodic:NAME@TIME`" + ` finds one by
its correlation ID. Cost: one query of the schedules' rows and one point
read per tick.
` + remoteHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if ticks < 0 || ticks > cmdq.MaxRecentTicks {
				return &usageError{cmd: cmd, msg: fmt.Sprintf("--ticks %d: give 0 to %d", ticks, cmdq.MaxRecentTicks)}
			}
			return f.withBackend(ctx, func(b backend) error {
				info, err := b.GetPeriodic(ctx, args[0], ticks)
				if err != nil {
					return fmt.Errorf("periodic schedule %s: %w", term(args[0]), err)
				}
				if asJSON {
					return writeJSON(out, info)
				}
				p := paletteOf(out)
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "name:\t%s\n", term(info.Name))
				fmt.Fprintf(tw, "spec:\t%s\n", term(info.Spec))
				fmt.Fprintf(tw, "type:\t%s\n", term(info.Type))
				fmt.Fprintf(tw, "queue:\t%s\n", term(info.Queue))
				if info.Error != "" {
					fmt.Fprintf(tw, "error:\t%s\n", term(info.Error))
				} else {
					fmt.Fprintf(tw, "next tick:\t%s\n", fmtTime(info.NextTick))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if len(info.RecentTicks) == 0 {
					return nil
				}
				fmt.Fprintln(out)
				tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TICK\tCOMMAND\tSTATE")
				for _, t := range info.RecentTicks {
					state := "missed"
					if !t.Missed {
						state = p.state(string(t.State), term(string(t.State)))
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\n", fmtTime(t.At), term(t.ID), state)
				}
				return tw.Flush()
			})
		},
	}
	f.add(c)
	f.readOnly = true
	c.Flags().BoolVar(&asJSON, "json", false, "print the schedule and its ticks as JSON")
	c.Flags().IntVar(&ticks, "ticks", api.DefaultRecentTicks, fmt.Sprintf("how many of the latest ticks to show (0 to %d)", cmdq.MaxRecentTicks))
	return c
}

func newPeriodicTriggerCmd() *cobra.Command {
	var (
		f      remoteFlags
		asJSON bool
		at     string
	)
	c := &cobra.Command{
		Use:   "trigger NAME",
		Short: "Issue a periodic schedule's command now, as a tick",
		Long: `trigger issues the schedule's command now, as a tick at this moment: its
command ID derives from the schedule's name and the trigger time as a
scheduled tick's does, and its correlation ID is periodic:NAME@TIME. The
schedule's own ticks go on as before. It prints the tick's time and its
command's ID (` + "`cmdq status ID`" + ` follows it).

A trigger is safe to retry: --at with the time an earlier trigger printed
(within the last hour) returns that same tick and issues nothing. Through a
server it needs the operator role.
` + remoteHelp,
		Example: `  cmdq periodic trigger reports.nightly
  cmdq periodic trigger reports.nightly --at 2026-11-28T21:04:05.678Z   # a retry: runs once`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			var t time.Time
			if at != "" {
				var err error
				if t, err = client.ParseRunAt(at); err != nil {
					return &usageError{cmd: cmd, msg: fmt.Sprintf("--at %s: %v; give the time an earlier trigger printed", term(at), err)}
				}
			}
			return f.withBackend(ctx, func(b backend) error {
				tick, err := b.TriggerPeriodic(ctx, args[0], t)
				if err != nil {
					return fmt.Errorf("trigger %s: %w", term(args[0]), err)
				}
				if asJSON {
					return writeJSON(out, tick)
				}
				if tick.Duplicate {
					fmt.Fprintf(out, "%s was triggered at %s before: its command is %s (nothing new issued)\n", term(args[0]), tick.At.UTC().Format(time.RFC3339Nano), term(tick.ID))
					return nil
				}
				fmt.Fprintf(out, "%s triggered at %s: command %s\n", term(args[0]), tick.At.UTC().Format(time.RFC3339Nano), term(tick.ID))
				return nil
			})
		},
	}
	f.add(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print the tick as JSON (at, id, state, duplicate)")
	c.Flags().StringVar(&at, "at", "", "the trigger time (RFC 3339): give the time an earlier trigger printed to repeat it without running twice; default now")
	return c
}

func newPeriodicLsCmd() *cobra.Command {
	var (
		f      remoteFlags
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the periodic schedules: spec, command type, queue, last tick (its command's state) and next tick",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			return f.withBackend(ctx, func(b backend) error {
				ps, err := b.Periodic(ctx)
				if err != nil {
					return fmt.Errorf("list periodic schedules: %w", err)
				}
				if asJSON {
					return writeJSON(out, ps)
				}
				if len(ps) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "cmdq: no periodic schedule is stored or registered here (processes store theirs when they start)")
					return nil
				}
				p := paletteOf(out)
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tSPEC\tTYPE\tQUEUE\tLAST TICK\tSTATE\tNEXT TICK")
				for _, s := range ps {
					last, state := "-", "-"
					if t := s.LastTick; t != nil {
						last = fmtTime(t.At)
						switch {
						case t.Missed:
							state = "missed"
						default:
							state = p.state(string(t.State), term(string(t.State)))
						}
					}
					next := fmtTime(s.NextTick)
					if s.Error != "" {
						next = "error: " + term(s.Error)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", term(s.Name), term(s.Spec), term(s.Type), term(s.Queue), last, state, next)
				}
				return tw.Flush()
			})
		},
	}
	f.add(c)
	f.readOnly = true
	c.Flags().BoolVar(&asJSON, "json", false, "print the schedules as JSON (each with its last tick's command ID)")
	return c
}

// rawCommand is a command given by type name and JSON params, for
// --periodic.
type rawCommand struct {
	typ    string
	params json.RawMessage
}

func (r rawCommand) CommandType() string { return r.typ }

func (r rawCommand) MarshalJSON() ([]byte, error) { return r.params, nil }

// registerPeriodic registers every --periodic NAME;SPEC;TYPE[;PARAMS] on
// c; it reports every bad one at once.
func registerPeriodic(c *cmdq.Client, specs []string) error {
	var errs []error
	for _, s := range specs {
		parts := strings.SplitN(s, ";", 4)
		if len(parts) < 3 {
			errs = append(errs, fmt.Errorf("--periodic %q: give NAME;SPEC;TYPE[;PARAMS], such as 'heartbeat;@every 1m;demo.echo;{\"n\":1}'", s))
			continue
		}
		name, spec, typ := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), strings.TrimSpace(parts[2])
		params := json.RawMessage("{}")
		if len(parts) == 4 && strings.TrimSpace(parts[3]) != "" {
			params = json.RawMessage(strings.TrimSpace(parts[3]))
			var obj map[string]any
			if err := json.Unmarshal(params, &obj); err != nil || obj == nil {
				errs = append(errs, fmt.Errorf("--periodic %q: the params %s are not a JSON object", s, parts[3]))
				continue
			}
		}
		if err := cmdq.ValidateType(typ); err != nil {
			errs = append(errs, fmt.Errorf("--periodic %q: %w", s, err))
			continue
		}
		if err := c.Periodic(name, spec, rawCommand{typ: typ, params: params}); err != nil {
			errs = append(errs, fmt.Errorf("--periodic %q: %w", s, err))
		}
	}
	return errors.Join(errs...)
}
