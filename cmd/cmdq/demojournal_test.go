package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtest"
)

// TestDemoJournal runs a demo command with --demo-journal's journal and
// reads back one line per execution start, step, recorded step and end.
func TestDemoJournal(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal")
	j, err := openDemoJournal(path, "w-test")
	if err != nil {
		t.Fatal(err)
	}
	c := cmdqtest.New(t)
	if err := registerDemo(c, 3*time.Second, j); err != nil {
		t.Fatal(err)
	}
	def, ok := c.Lookup("demo.steps")
	if !ok {
		t.Fatal("demo.steps not registered")
	}
	if def.Options.Lease != 3*time.Second {
		t.Errorf("demo.steps lease %s, want the 3s passed to registerDemo", def.Options.Lease)
	}
	id := "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d"
	if _, err := c.IssueRaw(context.Background(), cmdq.Raw{ID: id, Type: "demo.steps", Params: []byte(`{"steps":3,"failAt":2}`)}); err != nil {
		t.Fatal(err)
	}
	cmdqtest.Drain(t, c)
	evs, err := c.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []int
	for _, e := range evs {
		if e.Kind == cmdq.EventStepCompleted {
			recorded = append(recorded, e.Step)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var jl journalLine
		if err := json.Unmarshal([]byte(l), &jl); err != nil {
			t.Fatalf("journal line %q: %v", l, err)
		}
		if jl.ID != id || jl.Type != "demo.steps" || jl.Attempt < 1 || jl.Worker != "w-test" || jl.PID != os.Getpid() || jl.T.IsZero() {
			t.Errorf("journal line %q: want id, type, an attempt, worker w-test, this pid and a time", l)
		}
		s := jl.Ev
		if jl.Step != 0 {
			s += " " + string(rune('0'+jl.Step))
		}
		if jl.Err != "" {
			s += " error"
		}
		got = append(got, fmt.Sprintf("%d:%s", jl.Attempt, s))
	}
	// Attempt 1 fails at step 2; attempt 2 resumes there.
	want := "1:begin,1:step 1,1:stepped 1,1:end error,2:begin,2:step 2,2:stepped 2,2:step 3,2:stepped 3,2:end"
	if strings.Join(got, ",") != want {
		t.Fatalf("journal %v, want %s", got, want)
	}
	if fmt.Sprint(recorded) != "[1 2 3]" {
		t.Fatalf("recorded steps %v, want [1 2 3]", recorded)
	}
}

// TestDemoJournalFlagsHidden: the test instrumentation flags work but do not
// clutter --help.
func TestDemoJournalFlagsHidden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"serve", "worker"} {
		c, _, err := newRootCmd().Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range []string{"demo-journal", "demo-lease"} {
			f := c.Flags().Lookup(flag)
			if f == nil || !f.Hidden {
				t.Errorf("cmdq %s --%s: want a hidden flag, got %+v", name, flag, f)
			}
		}
	}
}
