package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// rawUnsafe returns the first rune of s that a terminal would act on
// (escape.go's unsafeRune, newlines and tabs aside), or -1.
func rawUnsafe(s string) rune {
	for _, r := range s {
		if unsafeRune(r) && r != '\n' && r != '\t' {
			return r
		}
	}
	return -1
}

// TestCLIEscapesControlCharacters: an issuer (correlation ID) and a handler
// (errors) choose text the CLI prints. Terminal escape sequences, \r and
// bidi overrides in it must print visibly escaped, in every command's text
// and JSON output, never raw.
func TestCLIEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	const evil = "\u001b[31mFAKE\u001b[0m\rOVERWRITE"
	const shown = `\x1b[31mFAKE\x1b[0m\rOVERWRITE`
	s := apitest.Start(t, apitest.Options{})
	res, err := s.Client.IssueRaw(context.Background(), cmdq.Raw{Type: "demo.echo", CorrelationID: evil})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ID
	s.Poison(t, id, "reason "+evil, "boom "+evil+"\nstatus completed \u202eevil")
	srv := []string{"--server", s.URL}

	check := func(what string, r result, wants ...string) {
		t.Helper()
		for _, out := range []string{r.stdout, r.stderr} {
			if c := rawUnsafe(out); c >= 0 {
				t.Errorf("%s prints %U raw:\nstdout %q\nstderr %q", what, c, r.stdout, r.stderr)
			}
		}
		for _, w := range wants {
			if !strings.Contains(r.stdout+r.stderr, w) {
				t.Errorf("%s: output lacks %q:\nstdout %s\nstderr %s", what, w, r.stdout, r.stderr)
			}
		}
	}

	st := mustRun(t, nil, append([]string{"status", id}, srv...)...)
	check("status", st, "correlation  "+shown, `boom \x1b[31mFAKE\x1b[0m\rOVERWRITE\nstatus completed \u202eevil`)
	// The forged "status completed" stays inside the last-error line.
	for _, l := range strings.Split(st.stdout, "\n") {
		if strings.HasPrefix(l, "status completed") {
			t.Errorf("status output has a forged line %q", l)
		}
	}
	check("poison ls", mustRun(t, nil, append([]string{"poison", "ls", "--wide"}, srv...)...), `reason `+shown)
	check("poison show", mustRun(t, nil, append([]string{"poison", "show", id}, srv...)...), "reason       reason "+shown)
	for _, args := range [][]string{{"poison", "show", id, "--json"}, {"status", id, "--json"}, {"poison", "ls", "--json"}} {
		r := mustRun(t, nil, append(args, srv...)...)
		check(strings.Join(args[:2], " "), r, `\u001b[31mFAKE`, `\u202eevil`)
		if !json.Valid([]byte(r.stdout)) {
			t.Errorf("%s: output is not JSON: %s", strings.Join(args, " "), r.stdout)
		}
	}
	// send of the same command: it exists and is poisoned; the error quotes
	// the last error.
	r := runCmdq(t, 30*time.Second, nil, append([]string{"send", "demo.echo", "--id", id, "--correlation-id", evil, "--wait"}, srv...)...)
	if r.code != 1 {
		t.Fatalf("send --wait of a poisoned command: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	check("send --wait", r, id+" poisoned", `ended poisoned: boom `+shown)

	// Unit: every escape is visible and reversible in Go syntax.
	if got := term(evil + "\u202e\u0085\x7f\xff\t"); got != shown+`\u202e\u0085\x7f\xff\t` {
		t.Errorf("term = %q", got)
	}
}
