package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq"
)

// cmdq cancel and cmdq queue: cancelling commands, pausing and resuming
// queues, through a server or a store (the backends of cli.go).

func init() { extraCommands = append(extraCommands, newCancelCmd, newQueueCmd) }

func (b httpBackend) Cancel(ctx context.Context, id string) (cmdq.CancelResult, error) {
	r, err := b.c.Cancel(ctx, id)
	return r, b.wrap(err)
}

func (b httpBackend) Queues(ctx context.Context) ([]cmdq.QueueInfo, error) {
	qs, err := b.c.Queues(ctx)
	return qs, b.wrap(err)
}

func (b httpBackend) PauseQueue(ctx context.Context, name string) (cmdq.QueueInfo, error) {
	q, err := b.c.PauseQueue(ctx, name)
	return q, b.wrap(err)
}

func (b httpBackend) ResumeQueue(ctx context.Context, name string) (cmdq.QueueInfo, error) {
	q, err := b.c.ResumeQueue(ctx, name)
	return q, b.wrap(err)
}

func (b *storeBackend) Cancel(ctx context.Context, id string) (cmdq.CancelResult, error) {
	if err := cmdq.ValidateID(id); err != nil {
		return cmdq.CancelResult{}, err
	}
	r, err := b.c.Cancel(ctx, id, b.by)
	return r, wrapStore(err)
}

func (b *storeBackend) Queues(ctx context.Context) ([]cmdq.QueueInfo, error) {
	return b.c.ListQueues(ctx)
}

func (b *storeBackend) PauseQueue(ctx context.Context, name string) (cmdq.QueueInfo, error) {
	return b.queueAction(ctx, name, b.c.PauseQueue)
}

func (b *storeBackend) ResumeQueue(ctx context.Context, name string) (cmdq.QueueInfo, error) {
	return b.queueAction(ctx, name, b.c.ResumeQueue)
}

func (b *storeBackend) queueAction(ctx context.Context, name string, act func(ctx context.Context, name, by string) (cmdq.QueueInfo, error)) (cmdq.QueueInfo, error) {
	q, err := act(ctx, name, b.by)
	if errors.Is(err, cmdq.ErrUnknownQueue) {
		return q, &cliError{msg: fmt.Sprintf("no queue %q is known here; `cmdq queue ls` lists the queues", name), err: err}
	}
	if err != nil {
		return q, err
	}
	if n, err := b.c.QueueDepth(ctx, name); err == nil {
		q.Depth = n
	}
	return q, nil
}

func newCancelCmd() *cobra.Command {
	var f remoteFlags
	c := &cobra.Command{
		Use:   "cancel ID...",
		Short: "Cancel commands that have not ended (they never run again; a running handler is told to stop)",
		Long: `cancel cancels each command: a pending, scheduled, retrying or running
command becomes cancelled (final) and never runs again; a handler running it
has its context cancelled (at once in the server's process, elsewhere at its
next lease renewal). A command that already completed, was poisoned or
discarded cannot be cancelled (discard a poisoned one: cmdq poison rm). A
command issued moments ago may take up to 9 s to cancel on Azure (every
processor must know of it first). It exits 1 if any cancel failed.
` + remoteHelp,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return f.withBackend(ctx, func(b backend) error {
				var errs []error
				for _, id := range args {
					id = cmdq.NormalizeID(id)
					r, err := b.Cancel(ctx, id)
					if err != nil {
						errs = append(errs, fmt.Errorf("cancel %s: %w", id, err))
						continue
					}
					if r.Already {
						fmt.Fprintf(cmd.OutOrStdout(), "%s was already cancelled\n", term(id))
					} else {
						fmt.Fprintf(cmd.OutOrStdout(), "%s cancelled\n", term(id))
					}
				}
				return errors.Join(errs...)
			})
		},
	}
	f.add(c)
	return c
}

func newQueueCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "queue",
		Short: "List queues, pause or resume them",
		Long: `queue lists the logical queues with their depth and whether they are
paused, and pauses or resumes them. A paused queue is paused for every
processor on every machine (within 10 s) and stays paused across restarts
until it is resumed; issuing into it still works, its commands wait.
` + remoteHelp,
	}
	c.AddCommand(newQueueLsCmd(), newQueueActionCmd("pause"), newQueueActionCmd("resume"))
	return c
}

func newQueueLsCmd() *cobra.Command {
	var (
		f      remoteFlags
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the queues with their depth and pause state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			return f.withBackend(ctx, func(b backend) error {
				qs, err := b.Queues(ctx)
				if err != nil {
					return fmt.Errorf("list queues: %w", err)
				}
				if asJSON {
					return writeJSON(out, qs)
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "QUEUE\tDEPTH\tSTATE\tSINCE\tBY")
				for _, q := range qs {
					depth, state := "?", "running"
					if q.Depth >= 0 {
						depth = fmt.Sprint(q.Depth)
					}
					if q.Paused {
						state = "paused"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", term(q.Name), depth, state, fmtTime(q.Since), term(q.By))
				}
				return tw.Flush()
			})
		},
	}
	f.add(c)
	f.readOnly = true
	c.Flags().BoolVar(&asJSON, "json", false, "print the queues as JSON")
	return c
}

func newQueueActionCmd(action string) *cobra.Command {
	var f remoteFlags
	short := "Pause queues: no processor starts their commands (within 10 s) until they are resumed"
	if action == "resume" {
		short = "Resume paused queues: processors start their commands again"
	}
	c := &cobra.Command{
		Use:   action + " QUEUE...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return f.withBackend(ctx, func(b backend) error {
				var errs []error
				for _, name := range args {
					var q cmdq.QueueInfo
					var err error
					if action == "pause" {
						q, err = b.PauseQueue(ctx, name)
					} else {
						q, err = b.ResumeQueue(ctx, name)
					}
					if err != nil {
						errs = append(errs, fmt.Errorf("%s %s: %w", action, name, err))
						continue
					}
					depth := ""
					if q.Depth >= 0 {
						depth = fmt.Sprintf(" (%d messages)", q.Depth)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s %sd%s\n", term(name), action, depth)
				}
				return errors.Join(errs...)
			})
		},
	}
	f.add(c)
	return c
}
