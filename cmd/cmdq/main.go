// Command cmdq runs and operates cmdq: the HTTP API with an in-process
// processor (serve), a processor alone (worker), and operator commands that
// issue commands, follow their status and handle poisoned ones (send, status,
// poison).
//
// Every flag can also be set with an environment variable CMDQ_<FLAG>, the
// flag's name in upper case with dashes turned into underscores (--addr is
// CMDQ_ADDR, --azure-connection-string is CMDQ_AZURE_CONNECTION_STRING). A
// flag given on the command line wins over its variable. `cmdq <command>
// --help` lists every flag with its default and variable; docs/configuration.md
// is the full reference.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// processStart is when the process started; `worker --run-for` counts its
// time box from here so the whole process exits before the time is up.
var processStart = time.Now()

// extraCommands lets other files of this package add subcommands (for example
// `cmdq bench`) without touching newRootCmd.
var extraCommands []func() *cobra.Command

// exitError carries a process exit code with an error that was already
// reported (or needs no message).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes the command line and returns the process exit code.
func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = context.WithValue(ctx, stopSignalsKey{}, stop)
	root := newRootCmd()
	root.SetArgs(args)
	// Output carries text from issuers and handlers: no raw control
	// characters reach the terminal (escape.go).
	stdout, stderr := terminalWriter(os.Stdout), terminalWriter(os.Stderr)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	err = storageRefused(err)
	var ue *usageError
	if errors.As(err, &ue) {
		ue.report(stderr)
		return exitUsage
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, paletteOf(stderr).errorPrefix(), ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, paletteOf(stderr).errorPrefix(), err)
	return 1
}

// newRootCmd builds the command tree.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "cmdq",
		Short: "cmdq — command processing on Azure Storage or an embedded store",
		Long: `cmdq issues commands, stores their parameters in a table, queues a small
message, runs typed handlers in pull-mode processors, records every step of a
command's life and parks commands that keep failing in a poison table.

Start here:
  cmdq serve                      API + processor, embedded store in ./cmdq-data,
                                  demo handlers (demo.echo, demo.sleep, demo.fail, demo.steps)
  cmdq send demo.echo --wait      issue a command and wait for it
  cmdq status ID --watch          follow a command's events
  cmdq poison ls                  list poisoned commands

Every flag can also be set with the environment variable CMDQ_<FLAG>
(--addr is CMDQ_ADDR); a flag on the command line wins.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnv(cmd.Flags())
		},
	}
	root.AddCommand(newServeCmd(), newWorkerCmd(), newSendCmd(), newStatusCmd(), newPoisonCmd())
	for _, f := range extraCommands {
		root.AddCommand(f())
	}
	annotateEnv(root)
	strictUsage(root)
	return root
}

// envName returns the environment variable of a flag: CMDQ_ + upper case,
// dashes as underscores.
func envName(flag string) string {
	return "CMDQ_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// annotateEnv appends "[env CMDQ_X]" to every flag's usage in the tree, once.
func annotateEnv(root *cobra.Command) {
	seen := map[*pflag.Flag]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if seen[f] || f.Name == "help" {
					return
				}
				seen[f] = true
				f.Usage += " [env " + envName(f.Name) + "]"
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// applyEnv sets every flag not given on the command line from its CMDQ_
// variable, when that is set. A flag set this way counts as changed.
func applyEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q is not a valid --%s: %w", envName(f.Name), v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}
