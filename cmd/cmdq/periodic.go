package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq"
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

func newPeriodicCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "periodic",
		Short: "List periodic schedules with their last and next tick",
		Long: `periodic lists the periodic schedules: those every process that runs one
stored when it started (cmdq.Client.Periodic in your program, or serve and
worker with --periodic), and those the server's own process registers.
` + remoteHelp,
	}
	c.AddCommand(newPeriodicLsCmd())
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
