package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestDemoJournal runs a demo handler with --demo-journal's journal and
// reads back one line per execution start, step, recorded step and end.
func TestDemoJournal(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal")
	j, err := openDemoJournal(path, "w-test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := embedded.Open(filepath.Join(t.TempDir(), "data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := cmdq.New(st, cmdq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := registerDemo(c, 3*time.Second, j); err != nil {
		t.Fatal(err)
	}
	def, ok := c.Lookup("demo.steps")
	if !ok {
		t.Fatal("demo.steps not registered")
	}
	if def.Lease != 3*time.Second {
		t.Errorf("demo.steps lease %s, want the 3s passed to registerDemo", def.Lease)
	}
	id := "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d"
	var recorded []int
	run := registry.NewRun(registry.RunInfo{ID: id, Type: "demo.steps", Attempt: 1, Record: func(_ context.Context, step int, _ string) error {
		recorded = append(recorded, step)
		return nil
	}})
	err = def.Invoke(context.Background(), []byte(`{"steps":3,"failAt":2}`), run)
	if err == nil || !strings.Contains(err.Error(), "planned failure at step 2") {
		t.Fatalf("demo.steps attempt 1 returned %v, want its planned failure at step 2", err)
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
		if jl.ID != id || jl.Type != "demo.steps" || jl.Attempt != 1 || jl.Worker != "w-test" || jl.PID != os.Getpid() || jl.T.IsZero() {
			t.Errorf("journal line %q: want id, type, attempt 1, worker w-test, this pid and a time", l)
		}
		s := jl.Ev
		if jl.Step != 0 {
			s += " " + string(rune('0'+jl.Step))
		}
		if jl.Err != "" {
			s += " error"
		}
		got = append(got, s)
	}
	want := "begin,step 1,stepped 1,end error"
	if strings.Join(got, ",") != want {
		t.Fatalf("journal %v, want %s", got, want)
	}
	if len(recorded) != 1 || recorded[0] != 1 {
		t.Fatalf("recorded steps %v, want [1]", recorded)
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
