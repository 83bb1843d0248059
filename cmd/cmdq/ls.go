package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/suggest"
)

// cmdq ls: the commands, a page at a time, through a server
// (GET /v1/commands) or a store (cmdq.Client.ListCommands).

func init() { extraCommands = append(extraCommands, newLsCmd) }

func (b httpBackend) ListCommands(ctx context.Context, q cmdq.CommandQuery) (cmdq.CommandPage, error) {
	p, err := b.c.ListCommands(ctx, q)
	return p, b.wrap(err)
}

func (b *storeBackend) ListCommands(ctx context.Context, q cmdq.CommandQuery) (cmdq.CommandPage, error) {
	return b.c.ListCommands(ctx, q)
}

// lsDefaultLimit is the page size of `cmdq ls`, as of `cmdq poison ls`.
const lsDefaultLimit = 50

// lsStates are the states `cmdq ls --state` accepts, in lifecycle order.
var lsStates = []cmdq.State{cmdq.StatePending, cmdq.StateScheduled, cmdq.StateRunning, cmdq.StateRetrying,
	cmdq.StateCompleted, cmdq.StatePoisoned, cmdq.StateDiscarded, cmdq.StateCancelled}

// parseWhen reads --since and --until: an RFC 3339 time, or a duration
// that long before now (90m: an hour and a half ago).
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--%s %q: give an RFC 3339 time (such as 2026-05-01T09:00:00Z) or how long ago (such as 90m or 24h)", flag, v)
}

func newLsCmd() *cobra.Command {
	var (
		f            remoteFlags
		q            cmdq.CommandQuery
		state        string
		since, until string
		all          bool
		asJSON       bool
		wide         bool
	)
	c := &cobra.Command{
		Use:   "ls",
		Short: "List commands by state, type, queue, correlation ID and issue time, a page at a time",
		Long: `ls lists commands in ID order, filtered by --state, --type, --queue,
--correlation-id and the time they were issued (--since, --until: an RFC
3339 time or how long ago, such as 2h). It prints --limit commands (default 50, at most 1000), then, when
there are more, the flag that continues the listing (--page TOKEN); --all
prints every page. --json prints the page as JSON (with --all: every
command in one "commands" array).

Each page is one table query when the filters keep every row read; filters
are applied to the rows read, so a selective one reads on (one query per
--limit rows) until the page is full or the table ends (docs/cli.md).
` + remoteHelp,
		Example: `  cmdq ls --state poisoned
  cmdq ls --type billing.ChargeCard --since 24h --json
  cmdq ls --correlation-id order-42 --all
  cmdq ls --store embedded --data ./cmdq-data --state retrying`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if state != "" {
				q.State = cmdq.State(strings.ToLower(state))
				known := false
				names := make([]string, len(lsStates))
				for i, s := range lsStates {
					known = known || q.State == s
					names[i] = string(s)
				}
				if !known {
					msg := fmt.Sprintf("--state %q is not a state", state)
					if s := suggest.Closest(state, names); s != "" {
						msg += fmt.Sprintf(" (did you mean %s?)", s)
					}
					return &usageError{cmd: cmd, msg: msg + "; use one of " + strings.Join(names, ", ")}
				}
			}
			if q.Type != "" {
				if err := cmdq.ValidateType(q.Type); err != nil {
					return &usageError{cmd: cmd, msg: fmt.Sprintf("--type: %v", err)}
				}
			}
			now := time.Now()
			var err error
			if since != "" {
				if q.IssuedSince, err = parseWhen("since", since, now); err != nil {
					return &usageError{cmd: cmd, msg: err.Error()}
				}
			}
			if until != "" {
				if q.IssuedBefore, err = parseWhen("until", until, now); err != nil {
					return &usageError{cmd: cmd, msg: err.Error()}
				}
			}
			if !q.IssuedSince.IsZero() && !q.IssuedBefore.IsZero() && !q.IssuedBefore.After(q.IssuedSince) {
				return &usageError{cmd: cmd, msg: fmt.Sprintf("--until (%s) must be after --since (%s)", fmtTime(q.IssuedBefore), fmtTime(q.IssuedSince))}
			}
			if q.Limit < 1 || q.Limit > cmdq.MaxCommandLimit {
				return &usageError{cmd: cmd, msg: fmt.Sprintf("--limit %d: give 1 to %d", q.Limit, cmdq.MaxCommandLimit)}
			}
			if all && q.Continuation != "" {
				return &usageError{cmd: cmd, msg: "--all lists from the start; leave out --page, or --all to go on page by page"}
			}
			return f.withBackend(ctx, func(b backend) error {
				var listed []cmdq.Status
				for {
					page, err := b.ListCommands(ctx, q)
					var ce *client.Error
					if errors.As(err, &ce) && ce.Status == http.StatusMethodNotAllowed {
						return fmt.Errorf("list commands: the server has no command listing (it is older than cmdq ls): upgrade it, or list its store directly with --store: %w", err)
					}
					if err != nil {
						return fmt.Errorf("list commands: %w", err)
					}
					if !all {
						if asJSON {
							return writeJSON(out, page)
						}
						printCommands(out, page.Commands, wide)
						if page.Continuation != "" {
							fmt.Fprintf(cmd.ErrOrStderr(), "more commands: add --page %s (or --all for every page)\n", shellQuote(term(page.Continuation)))
						}
						return nil
					}
					listed = append(listed, page.Commands...)
					if page.Continuation == "" {
						break
					}
					q.Continuation = page.Continuation
				}
				if asJSON {
					if listed == nil {
						listed = []cmdq.Status{}
					}
					return writeJSON(out, cmdq.CommandPage{Commands: listed})
				}
				printCommands(out, listed, wide)
				return nil
			})
		},
	}
	f.add(c)
	f.readOnly = true
	fl := c.Flags()
	fl.StringVar(&state, "state", "", "only commands in this state: pending, scheduled, running, retrying, completed, poisoned, discarded or cancelled (default all)")
	fl.StringVar(&q.Type, "type", "", "only commands of this type (default all)")
	fl.StringVar(&q.Queue, "queue", "", "only commands of this logical queue (default all)")
	fl.StringVar(&q.CorrelationID, "correlation-id", "", "only commands with exactly this correlation ID (default all)")
	fl.StringVar(&since, "since", "", "only commands issued at or after this time: RFC 3339, or how long ago, such as 2h (default: no bound)")
	fl.StringVar(&until, "until", "", "only commands issued before this time: RFC 3339, or how long ago (default: no bound)")
	fl.IntVar(&q.Limit, "limit", lsDefaultLimit, "most commands to print, 1 to 1000 (a page)")
	fl.StringVar(&q.Continuation, "page", "", "continue a listing from the token its previous page printed")
	fl.BoolVar(&all, "all", false, "print every page, not only the first --limit commands")
	fl.BoolVar(&asJSON, "json", false, "print the page as JSON (with --all, every command)")
	fl.BoolVar(&wide, "wide", false, "print every column whole on a terminal too (the last error is otherwise shortened to fit its width, or COLUMNS; through a pipe rows are whole)")
	return c
}

// printCommands prints statuses as a table with a header, or a line
// saying there are none.
func printCommands(w io.Writer, sts []cmdq.Status, wide bool) {
	if len(sts) == 0 {
		fmt.Fprintln(w, "no commands")
		return
	}
	rows := [][]string{{"COMMAND", "TYPE", "STATE", "ATTEMPTS", "QUEUE", "ISSUED", "UPDATED", "LAST ERROR"}}
	for _, st := range sts {
		typ := oneLine(term(st.Type), 32)
		if wide {
			typ = term(st.Type)
		}
		rows = append(rows, []string{term(st.ID), typ, term(string(st.State)),
			strconv.Itoa(st.Attempts), term(st.Queue), fmtTime(st.CreatedAt), fmtTime(st.UpdatedAt), oneLine(term(st.LastError), 1<<20)})
	}
	// On a narrow terminal the update time, the queue, the issue time and
	// the attempts make room for the last error.
	table(w, rows, columns(w), wide, []int{6, 4, 5, 3}, 20)
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and ._-=:/+ (a continuation token can hold a |).
func shellQuote(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-=:/+", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
