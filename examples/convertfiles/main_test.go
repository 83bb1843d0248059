package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtest"
)

// TestResumesAtFailedFile runs the example: the first attempt converts files
// 1..29 and fails at 30; the retry converts 30..N; every file exactly once.
func TestResumesAtFailedFile(t *testing.T) {
	t.Parallel()
	const files, failAt = 40, 30
	dir := t.TempDir()
	var out bytes.Buffer
	rep, err := Run(context.Background(), Options{Dir: dir, Files: files, FailAt: failAt}, &out)
	if err != nil {
		t.Fatalf("Run: %v\noutput:\n%s", err, out.String())
	}
	st := rep.Status
	if st.State != cmdq.StateCompleted || st.Attempts != 2 || st.Step != files || st.LastError != "" {
		t.Fatalf("status = %+v, want completed after 2 attempts at step %d with no last error", st, files)
	}

	// Each file converted exactly once, and the output is really on disk.
	for i := 1; i <= files; i++ {
		name := fmt.Sprintf("file-%03d.txt", i)
		if n := rep.Conversions[name]; n != 1 {
			t.Errorf("%s converted %d times, want 1", name, n)
		}
		in, err := os.ReadFile(filepath.Join(rep.InputDir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(rep.OutputDir, name+".upper"))
		if err != nil {
			t.Fatalf("output of %s: %v", name, err)
		}
		if want := strings.ToUpper(string(in)); string(got) != want {
			t.Errorf("output of %s = %q, want %q", name, got, want)
		}
	}
	if len(rep.Conversions) != files {
		t.Errorf("%d distinct files converted, want %d", len(rep.Conversions), files)
	}

	// The timeline: created, started(1), steps 1..29 (attempt 1), failed,
	// started(2), steps 30..N (attempt 2), completed.
	want := []string{"created", "started a1"}
	for s := 1; s < failAt; s++ {
		want = append(want, fmt.Sprintf("step_completed a1 s%d", s))
	}
	want = append(want, "failed a1", "started a2")
	for s := failAt; s <= files; s++ {
		want = append(want, fmt.Sprintf("step_completed a2 s%d", s))
	}
	want = append(want, "completed a2")
	got := make([]string, len(rep.Events))
	for i, e := range rep.Events {
		got[i] = string(e.Kind)
		if e.Attempt > 0 {
			got[i] += fmt.Sprintf(" a%d", e.Attempt)
		}
		if e.Step > 0 {
			got[i] += fmt.Sprintf(" s%d", e.Step)
		}
		if e.Seq != int64(i+1) {
			t.Errorf("event %d has Seq %d", i, e.Seq)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	failed := rep.Events[failAt+1] // created, started, 29 steps, failed
	if !strings.Contains(failed.Error, "file-030.txt") || !strings.Contains(failed.Error, "locked") {
		t.Errorf("failed event error = %q, want it to name the locked file-030.txt", failed.Error)
	}
	if n := rep.Events[2].Note; n != "converted file-001.txt" {
		t.Errorf("first step note = %q", n)
	}

	// The printed report shows the outcome.
	for _, s := range []string{"status:   completed", "attempts: 2", "40 files converted exactly once, 0 more than once, 0 never"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
}

// TestNoFailureOneAttempt: with no locked file the command completes in one
// attempt.
func TestNoFailureOneAttempt(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Options{Dir: t.TempDir(), Files: 5, FailAt: -1, Format: "reverse"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if st := rep.Status; st.State != cmdq.StateCompleted || st.Attempts != 1 || st.Step != 5 {
		t.Fatalf("status = %+v, want completed in 1 attempt at step 5", st)
	}
	got, err := os.ReadFile(filepath.Join(rep.OutputDir, "file-002.txt.reverse"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "2 elif tupni si siht\nsenil owt sah ti\n"; string(got) != want {
		t.Fatalf("reversed = %q, want %q", got, want)
	}
}

// TestUnknownFormatPoisoned: a permanent error poisons the command at once,
// without retrying and without converting anything.
func TestUnknownFormatPoisoned(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Options{Dir: t.TempDir(), Files: 3, FailAt: -1, Format: "pdf"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	st := rep.Status
	if st.State != cmdq.StatePoisoned || st.Attempts != 1 || st.Step != 0 || !strings.Contains(st.LastError, `unknown format "pdf"`) {
		t.Fatalf("status = %+v, want poisoned after 1 attempt naming the format", st)
	}
	last := rep.Events[len(rep.Events)-1]
	if last.Kind != cmdq.EventPoisoned || last.Reason != cmdq.ReasonPermanent {
		t.Fatalf("last event = %+v, want poisoned with reason %q", last, cmdq.ReasonPermanent)
	}
	if len(rep.Conversions) != 0 {
		t.Fatalf("conversions = %v, want none", rep.Conversions)
	}
}

// TestBadOptions: a clear error for a batch with no files.
func TestBadOptions(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Options{Dir: t.TempDir(), Files: -1}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "Files must be at least 1") {
		t.Fatalf("err = %v", err)
	}
}

// TestHandlerWithTestKit tests the handler alone with the user test kit
// (cmdqtest): a Client on a temporary store, the command issued and
// drained, and its outcome checked.
func TestHandlerWithTestKit(t *testing.T) {
	t.Parallel()
	in, out := t.TempDir(), t.TempDir()
	files, err := makeInputs(in, 3)
	if err != nil {
		t.Fatal(err)
	}
	conv := &converter{in: in, out: out, locked: map[string]bool{files[1]: true}, counts: map[string]int{}}
	c := cmdqtest.New(t)
	if err := cmdq.RegisterWith(c, conv.handle, retryFast); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(context.Background(), ConvertBatch{Files: files, Format: "upper"})
	if err != nil {
		t.Fatal(err)
	}
	cmdqtest.Drain(t, c)
	st := cmdqtest.RequireState(t, c, res.ID, cmdq.StateCompleted)
	if st.Attempts != 2 || st.Step != 3 {
		t.Fatalf("completed after %d attempts at step %d, want 2 attempts and step 3", st.Attempts, st.Step)
	}
	cmdqtest.RequireEvents(t, c, res.ID,
		cmdq.EventCreated, cmdq.EventStarted, cmdq.EventStepCompleted, cmdq.EventFailed,
		cmdq.EventStarted, cmdq.EventStepCompleted, cmdq.EventStepCompleted, cmdq.EventCompleted)
}
