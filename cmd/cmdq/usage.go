package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cmdq-dev/cmdq/internal/suggest"
)

// Usage mistakes (a missing or extra argument, an unknown subcommand or
// flag, a group command without its subcommand) exit with exitUsage after
// one sentence that says what to type and the command's usage line.

// exitUsage is the exit status of a usage mistake (as shells' builtins
// and most CLIs use it).
const exitUsage = 2

// usageError is a usage mistake on cmd: msg says what to type; full asks
// for the command's whole usage (its subcommands and flags) after it,
// instead of its usage line.
type usageError struct {
	cmd  *cobra.Command
	msg  string
	full bool
}

func (e *usageError) Error() string { return e.msg }

// report prints the mistake on w: "cmdq: <msg>", then the usage line (or
// the whole usage) and where the help is.
func (e *usageError) report(w io.Writer) {
	fmt.Fprintln(w, paletteOf(w).errorPrefix(), e.msg)
	if e.cmd == nil {
		return
	}
	if e.full {
		fmt.Fprint(w, e.cmd.UsageString())
		return
	}
	fmt.Fprintf(w, "usage: %s\nrun '%s --help' for its flags and examples\n", e.cmd.UseLine(), e.cmd.CommandPath())
}

// argNouns say what an argument of a Use line is, for the sentence of a
// missing one.
var argNouns = map[string]string{
	"ID":       "the command ID",
	"ID...":    "one or more command IDs",
	"TYPE":     "the command type (such as demo.echo)",
	"NAME":     "the schedule's name (`cmdq periodic ls` lists them)",
	"QUEUE...": "one or more queue names (`cmdq queue ls` lists them)",
}

// argSpec returns the arguments of cmd's Use line ("ID", "ID...") and
// the least and most it takes (most -1: no limit).
func argSpec(cmd *cobra.Command) (spec []string, least, most int) {
	spec = strings.Fields(cmd.Use)[1:]
	for _, a := range spec {
		if strings.HasPrefix(a, "[") {
			most = -1
			break
		}
		least++
		if strings.HasSuffix(a, "...") {
			most = -1
		}
	}
	if most != -1 {
		most = least
	}
	return spec, least, most
}

// argsMistake is the usage error of cmd given args that its Args refused.
func argsMistake(cmd *cobra.Command, args []string) *usageError {
	spec, least, most := argSpec(cmd)
	path := cmd.CommandPath()
	want := strings.TrimSpace(path + " " + strings.Join(spec, " "))
	switch {
	case len(args) < least:
		noun := argNouns[spec[len(args)]]
		if noun == "" {
			noun = spec[len(args)]
		}
		return &usageError{cmd: cmd, msg: fmt.Sprintf("%s needs %s: %s", path, noun, want)}
	case most == 0:
		return &usageError{cmd: cmd, msg: fmt.Sprintf("%s takes no arguments (%q is one; options are flags)", path, args[0])}
	default:
		return &usageError{cmd: cmd, msg: fmt.Sprintf("%s takes %d argument(s), not %d: %s", path, most, len(args), want)}
	}
}

// strictUsage makes every command of the tree under root report usage
// mistakes as usageErrors: unknown subcommands and group commands run
// without one, wrong arguments, bad flags.
func strictUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{cmd: cmd, msg: err.Error()}
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands() && !c.Runnable():
			groupCommand(c)
		case c.Args != nil:
			check := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				if check(cmd, args) != nil {
					return argsMistake(cmd, args)
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// groupCommand makes a command that only holds subcommands (cmdq poison)
// refuse an unknown subcommand and, but for the root, being run without
// one; the root without one prints its help.
func groupCommand(c *cobra.Command) {
	c.Args = cobra.ArbitraryArgs
	c.DisableFlagsInUseLine = true
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			if !cmd.HasParent() {
				return cmd.Help()
			}
			return &usageError{cmd: cmd, full: true, msg: fmt.Sprintf("%s needs a subcommand: %s", cmd.CommandPath(), strings.Join(subcommands(cmd), ", "))}
		}
		msg := fmt.Sprintf("unknown command %q for %s", args[0], cmd.CommandPath())
		if s := suggest.Closest(args[0], subcommands(cmd)); s != "" {
			msg += fmt.Sprintf(" (did you mean %s %s?)", cmd.CommandPath(), s)
		}
		return &usageError{msg: msg + fmt.Sprintf("; run '%s --help'", cmd.CommandPath())}
	}
}

// subcommands names cmd's subcommands (but help and hidden ones).
func subcommands(cmd *cobra.Command) []string {
	var subs []string
	for _, s := range cmd.Commands() {
		if s.IsAvailableCommand() {
			subs = append(subs, s.Name())
		}
	}
	return subs
}
