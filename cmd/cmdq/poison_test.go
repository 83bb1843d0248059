package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

// TestPoisonLsFitsWidth: poison ls fits the terminal's width (COLUMNS):
// the last error is shortened ("…"), and --wide prints it whole; through
// a pipe, without COLUMNS, rows are whole.
func TestPoisonLsFitsWidth(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	long := "connection to billing.internal:443 failed: " + strings.Repeat("the upstream said no ", 30) + "END"
	for range 3 {
		res, err := s.Client.IssueRaw(context.Background(), cmdq.Raw{Type: "billing.ChargeCard"})
		if err != nil {
			t.Fatal(err)
		}
		s.Poison(t, res.ID, "attempts exhausted", long)
	}
	srv := []string{"--server", s.URL}
	for _, cols := range []int{80, 120, 200} {
		r := mustRun(t, []string{"COLUMNS=" + itoa(cols)}, append([]string{"poison", "ls"}, srv...)...)
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "COMMAND") {
			t.Fatalf("COLUMNS=%d:\n%s", cols, r.stdout)
		}
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > cols {
				t.Errorf("COLUMNS=%d: a line of %d characters:\n%s", cols, n, l)
			}
		}
		if !strings.Contains(lines[1], "…") || strings.Contains(lines[1], "END") || !strings.Contains(lines[1], "connection to") {
			t.Errorf("COLUMNS=%d: the last error is not shortened: %s", cols, lines[1])
		}
	}
	r := mustRun(t, []string{"COLUMNS=80"}, append([]string{"poison", "ls", "--wide"}, srv...)...)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], long) {
		t.Errorf("--wide does not print the whole last error:\n%s", r.stdout)
	}
	// Through a pipe, without COLUMNS: rows are whole (poison ls | grep).
	r = mustRun(t, nil, append([]string{"poison", "ls"}, srv...)...)
	lines = strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], long) || !strings.Contains(lines[0], "DEQUEUES") {
		t.Errorf("poison ls through a pipe is cut:\n%s", r.stdout)
	}
}

// TestPoisonShowParams: poison show prints the command's params (laid out,
// bounded: deep nesting stays linear, a long value is cut with a note);
// --json carries them whole.
func TestPoisonShowParams(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	srv := []string{"--server", s.URL}
	small := `{"to":"ada@example.com","items":[{"sku":"A-1","qty":2}]}`
	big := `{"blob":"` + strings.Repeat("x", 20000) + `","deep":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`
	for _, params := range []string{small, big} {
		res, err := s.Client.IssueRaw(context.Background(), cmdq.Raw{Type: "shop.Order", Params: json.RawMessage(params)})
		if err != nil {
			t.Fatal(err)
		}
		s.Poison(t, res.ID, "attempts exhausted", "boom")
		r := mustRun(t, nil, append([]string{"poison", "show", res.ID}, srv...)...)
		if params == small {
			for _, want := range []string{"params", `"to": "ada@example.com"`, `"sku": "A-1"`} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("poison show lacks %q:\n%s", want, r.stdout)
				}
			}
		} else {
			if len(r.stdout) > 8000 || !strings.Contains(r.stdout, "--json") || !strings.Contains(r.stdout, "of 30") {
				t.Errorf("poison show of %d bytes of params printed %d bytes:\n%.600s", len(params), len(r.stdout), r.stdout)
			}
		}
		j := mustRun(t, nil, append([]string{"poison", "show", res.ID, "--json"}, srv...)...)
		var got struct {
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal([]byte(j.stdout), &got); err != nil {
			t.Fatalf("--json: %v", err)
		}
		var a, b any
		if json.Unmarshal(got.Params, &a) != nil || json.Unmarshal([]byte(params), &b) != nil || !jsonEqual(a, b) {
			t.Errorf("--json params differ from the stored ones (%d bytes)", len(got.Params))
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
