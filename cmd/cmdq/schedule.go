package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
)

// Scheduled commands in the CLI: send --at/--in (cli.go), the due line
// of status, and cmdq run-now.

func init() { extraCommands = append(extraCommands, newRunNowCmd) }

// scheduleFlags puts send's --at and --in into raw: at most one of them,
// --at an RFC 3339 time, --in a duration that is not negative.
func scheduleFlags(cmd *cobra.Command, at string, in time.Duration, raw *cmdq.Raw) error {
	atSet, inSet := cmd.Flags().Changed("at"), cmd.Flags().Changed("in")
	switch {
	case atSet && inSet:
		return errors.New("--at and --in were both given; give one of them (--at: when to run, --in: how long from now)")
	case inSet && in < 0:
		return fmt.Errorf("--in %s is negative; give a duration of 0 or more, such as 90s or 2h30m", in)
	case inSet:
		raw.Delay = in
	case atSet:
		t, err := client.ParseRunAt(at) // strict RFC 3339, as the API reads runAt
		if err != nil {
			return fmt.Errorf("--at %q is not an RFC 3339 time; give a time such as 2026-05-01T09:00:00Z (UTC) or 2026-05-01T11:00:00+02:00", at)
		}
		raw.RunAt = t
	}
	return nil
}

// dueLine says when a scheduled or retrying command is due, for status:
// "" for other commands.
func dueLine(st cmdq.Status, now time.Time) string {
	if st.RunAt.IsZero() || (st.State != cmdq.StateScheduled && st.State != cmdq.StateRetrying) {
		return ""
	}
	d := st.RunAt.Sub(now).Round(time.Second)
	if d <= 0 {
		return fmt.Sprintf("%s (now; it starts as soon as a processor takes it)", fmtTime(st.RunAt))
	}
	return fmt.Sprintf("%s (in %s; cmdq run-now %s makes it due now)", fmtTime(st.RunAt), d, term(st.ID))
}

func (b httpBackend) RunNow(ctx context.Context, id string) (cmdq.Status, error) {
	st, err := b.c.RunNow(ctx, id)
	return st, b.wrap(err)
}

func (b *storeBackend) RunNow(ctx context.Context, id string) (cmdq.Status, error) {
	if err := cmdq.ValidateID(id); err != nil {
		return cmdq.Status{}, err
	}
	st, err := b.c.RunNow(ctx, id, b.by)
	return st, wrapStore(err)
}

func newRunNowCmd() *cobra.Command {
	var f remoteFlags
	c := &cobra.Command{
		Use:   "run-now ID...",
		Short: "Make scheduled or retrying commands due now",
		Long: `run-now makes each command that waits for its time due now: a scheduled
command, or a retrying one whose retry delay has not ended ("retry now"; its
attempts count from 1 again). A processor starts it at its next poll (at once
in the server's process); its old message is deleted without running when it
shows up. A command that is pending without a schedule, running or ended
cannot be made due now. It exits 1 if any failed. Through a server it needs
the operator role.
` + remoteHelp,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return f.withBackend(ctx, func(b backend) error {
				var errs []error
				for _, id := range args {
					id = cmdq.NormalizeID(id)
					if _, err := b.RunNow(ctx, id); err != nil {
						errs = append(errs, fmt.Errorf("run-now %s: %w", id, err))
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s is due now\n", term(id))
				}
				return errors.Join(errs...)
			})
		},
	}
	f.add(c)
	return c
}
