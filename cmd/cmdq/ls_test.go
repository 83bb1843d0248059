package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/azurite"
)

// pageHint is the line `cmdq ls` prints on stderr when there are more
// commands.
var pageHint = regexp.MustCompile(`more commands: add --page '?([^' ]+)'?`)

// lsIDs runs `cmdq ls --json` with args and returns the IDs listed, in
// order, and the page's continuation.
func lsIDs(t *testing.T, target []string, args ...string) ([]string, string) {
	t.Helper()
	r := mustRun(t, nil, append(append([]string{"ls", "--json"}, args...), target...)...)
	var page cmdq.CommandPage
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil {
		t.Fatalf("ls --json %v: %v in %s", args, err, r.stdout)
	}
	ids := []string{}
	for _, st := range page.Commands {
		ids = append(ids, st.ID)
	}
	return ids, page.Continuation
}

// TestCLILs: `cmdq ls` lists commands by state, type, queue, correlation ID
// and issue time, a page at a time or all of them, as a table or JSON, on
// the embedded store, on Azure Storage (Azurite) and through a server.
func TestCLILs(t *testing.T) {
	t.Parallel()
	targets := map[string]func(t *testing.T) []string{
		"embedded": func(t *testing.T) []string {
			return []string{"--store", "embedded", "--data", t.TempDir()}
		},
		"azure": func(t *testing.T) []string {
			return []string{"--store", "azure", "--prefix", randomPrefix(), "--azure-connection-string", azurite.ConnectionString(t)}
		},
		"server": func(t *testing.T) []string {
			// No processor: the commands stay as they are issued.
			return []string{"--server", startServe(t, serveOpts{args: []string{"--no-processor"}}).URL}
		},
	}
	for name, target := range targets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			// Nothing issued yet: a server lists nothing; a store that
			// was never written to is said to be empty (ls creates
			// nothing: TestCLIReadOnlyCreatesNothing).
			if r := runCmdq(t, 30*time.Second, nil, append([]string{"ls"}, tg...)...); name == "server" && (r.code != 0 || strings.TrimSpace(r.stdout) != "no commands") ||
				name != "server" && (r.code != 1 || !strings.Contains(r.stderr, "nothing issued yet?")) {
				t.Fatalf("ls of nothing: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			a := sendID(t, nil, append([]string{"demo.echo", "--correlation-id", "order-1"}, tg...)...)
			// Every command after mid was issued after it (the clock is
			// the same; CreatedAt has milliseconds).
			mid := time.Now().UTC().Truncate(time.Millisecond).Add(time.Millisecond)
			waitFor(t, 10*time.Second, "the clock passes mid", func() bool { return time.Now().After(mid.Add(time.Millisecond)) })
			b := sendID(t, nil, append([]string{"demo.sleep", "--params", `{"ms":1}`, "--correlation-id", "order-2"}, tg...)...)
			c := sendID(t, nil, append([]string{"demo.echo", "--correlation-id", "order-1"}, tg...)...)
			mustRun(t, nil, append([]string{"cancel", c}, tg...)...)
			all := []string{a, b, c}
			slices.Sort(all)

			for _, tc := range []struct {
				args []string
				want []string
			}{
				{nil, all},
				{[]string{"--type", "demo.echo"}, []string{a, c}},
				{[]string{"--state", "cancelled"}, []string{c}},
				{[]string{"--state", "PENDING"}, []string{a, b}},
				{[]string{"--correlation-id", "order-1", "--state", "pending"}, []string{a}},
				{[]string{"--queue", "commands"}, all},
				{[]string{"--queue", "other"}, []string{}},
				{[]string{"--since", mid.Format(time.RFC3339Nano)}, []string{b, c}},
				{[]string{"--until", mid.Format(time.RFC3339Nano)}, []string{a}},
				{[]string{"--since", "1h", "--type", "demo.sleep"}, []string{b}},
				{[]string{"--until", "1h"}, []string{}},
			} {
				got, cont := lsIDs(t, tg, tc.args...)
				slices.Sort(got)
				slices.Sort(tc.want)
				if !slices.Equal(got, tc.want) || cont != "" {
					t.Errorf("ls %v: %v (continuation %q), want %v", tc.args, got, cont, tc.want)
				}
			}

			// A page at a time: the table, and the flag that continues it.
			var seen []string
			var page []string
			for i := 0; ; i++ {
				args := append([]string{"ls", "--limit", "1"}, tg...)
				if len(page) > 0 {
					args = append(args, "--page", page[1])
				}
				r := mustRun(t, nil, args...)
				lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
				if lines[0] == "no commands" && len(page) > 0 && len(seen) == 3 {
					break // a full last page may leave one empty page after it
				}
				if len(lines) != 2 || !strings.HasPrefix(lines[0], "COMMAND ") || !strings.Contains(lines[0], "QUEUE") {
					t.Fatalf("ls --limit 1, page %d:\n%s", i, r.stdout)
				}
				seen = append(seen, strings.Fields(lines[1])[0])
				page = pageHint.FindStringSubmatch(r.stderr)
				if page == nil {
					break
				}
				if i > 5 {
					t.Fatalf("more than 5 pages of one command for 3 commands: %v", seen)
				}
			}
			slices.Sort(seen)
			if !slices.Equal(seen, all) {
				t.Fatalf("page by page: %v, want %v", seen, all)
			}
			// --all: every page, one table (piped: every column whole).
			r := mustRun(t, nil, append([]string{"ls", "--limit", "1", "--all"}, tg...)...)
			lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
			if len(lines) != 4 || r.stderr != "" {
				t.Fatalf("ls --all:\n%s\nstderr %s", r.stdout, r.stderr)
			}
			for _, want := range []string{"demo.sleep", "cancelled", "commands", "UPDATED"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("ls --all lacks %q:\n%s", want, r.stdout)
				}
			}
			got, cont := lsIDs(t, tg, "--limit", "1", "--all")
			if len(got) != 3 || cont != "" {
				t.Errorf("ls --json --all --limit 1: %v %q", got, cont)
			}
			if got, cont := lsIDs(t, tg, "--limit", "2"); len(got) != 2 || cont == "" {
				t.Errorf("ls --json --limit 2: %v %q", got, cont)
			}
		})
	}
}
