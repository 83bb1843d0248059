package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProcs is a procInfo for the checker's own tests.
type fakeProcs struct {
	procs map[string]*proc
	logs  []string
}

func (f fakeProcs) byWorker(w string) *proc { return f.procs[w] }

func (f fakeProcs) grepLogs(s string, max int) []string {
	var out []string
	for _, l := range f.logs {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func acceptedCmd(id, typ, params string, poison bool) *command {
	return &command{ID: id, Type: typ, Params: params, WantPoison: poison, accepted: true, code: 202, tries: 1}
}

func ev(seq, kind, worker string, attempt, step int) event {
	return event{Seq: "e:" + seq, Kind: kind, Worker: worker, Attempt: attempt, Step: step}
}

// evAt is e written at at(ms).
func evAt(e event, ms int) event {
	e.Time = at(ms)
	return e
}

func run(worker string, pid, attempt, begin, end int, err string, steps ...stepMark) *execution {
	x := &execution{ID: "c1", Type: "demo.sleep", Worker: worker, PID: pid, Attempt: attempt, Begin: begin, End: end, BeginT: at(begin * 100), Err: err, Steps: steps}
	if end >= 0 {
		x.EndT = at(end * 100)
	}
	return x
}

func runCheck(t *testing.T, c *command, h *history, xs []*execution, ps fakeProcs, poison map[string]poisonEntry) *Report {
	t.Helper()
	if ps.procs == nil {
		ps.procs = map[string]*proc{}
	}
	if poison == nil {
		poison = map[string]poisonEntry{}
	}
	snap := &snapshot{cmds: map[string]*history{c.ID: h}, poison: poison, markers: map[string]bool{}, messages: map[string]int{}}
	j := &journal{byID: map[string][]*execution{c.ID: xs}}
	r := &Report{Faults: map[string]int{}}
	check(r, []*command{c}, snap, j, ps)
	return r
}

func invariants(r *Report) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Invariant)
	}
	return out
}

func TestCheckCleanHistoryHolds(t *testing.T) {
	t.Parallel()
	c := acceptedCmd("c1", "demo.fail", `{"times":1}`, false)
	h := &history{ID: "c1", Found: true, Status: "completed", Events: []event{
		ev("1", "created", "", 0, 0), ev("2", "started", "w1.1", 1, 0), ev("3", "failed", "w1.1", 1, 0),
		ev("4", "started", "w2.1", 2, 0), ev("5", "completed", "w2.1", 2, 0)}}
	xs := []*execution{run("w1.1", 1, 1, 1, 2, "planned"), run("w2.1", 2, 2, 3, 4, "")}
	r := runCheck(t, c, h, xs, fakeProcs{}, nil)
	if len(r.Violations) != 0 || r.Extra != 0 || r.Completed != 1 {
		t.Fatalf("a retry after a recorded failure: violations %v, extra %d, completed %d; want none, 0, 1", r.Violations, r.Extra, r.Completed)
	}
}

// TestCheckRequeuedMayRepeat: each recovery enqueue (here two re-issues of
// a pending command by its client) writes a requeued event; they belong to
// no attempt and are not "an event written twice".
func TestCheckRequeuedMayRepeat(t *testing.T) {
	t.Parallel()
	c := acceptedCmd("c1", "demo.echo", `{}`, false)
	h := &history{ID: "c1", Found: true, Status: "completed", Events: []event{
		ev("1", "created", "", 0, 0), ev("2", "requeued", "issuer", 0, 0), ev("3", "requeued", "issuer", 0, 0),
		ev("4", "started", "w1.1", 1, 0), ev("5", "completed", "w1.1", 1, 0)}}
	r := runCheck(t, c, h, []*execution{run("w1.1", 1, 1, 1, 2, "")}, fakeProcs{}, nil)
	if len(r.Violations) != 0 {
		t.Fatalf("two requeued events: violations %v, want none", r.Violations)
	}
}

// TestCheckPoisonedByLostDeliveries: a command designed to complete whose
// every delivery was cut off (killed while its handler ran, each recorded
// as lease_lost by a later delivery), so it reached the poison ceiling by
// dequeue count — here with as many executions as the ceiling — is the
// documented outcome, counted apart, not a violation.
func TestCheckPoisonedByLostDeliveries(t *testing.T) {
	t.Parallel()
	c := acceptedCmd("c1", "demo.sleep", `{"ms":1466}`, false)
	h := &history{ID: "c1", Found: true, Status: "poisoned", Events: []event{ev("1", "created", "", 0, 0),
		ev("2", "lease_lost", "s.3", 1, 0), ev("3", "lease_lost", "s.3", 2, 0), ev("4", "started", "s.3", 3, 0),
		ev("5", "lease_lost", "s.6", 3, 0), ev("6", "lease_lost", "s.6", 4, 0), ev("7", "lease_lost", "s.6", 5, 0),
		{Seq: "e:8", Kind: "poisoned", Worker: "s.6", Attempt: 6, Reason: "poison ceiling exceeded"}}}
	var xs []*execution
	ps := fakeProcs{procs: map[string]*proc{}}
	for i := 1; i <= 5; i++ {
		w := fmt.Sprintf("s.%d", i)
		xs = append(xs, run(w, i, i, 2*i, -1, ""))
		p := &proc{worker: w, killedAt: at(2*i*100 + 50)}
		ps.procs[w] = p
	}
	r := runCheck(t, c, h, xs, ps, map[string]poisonEntry{"c1": {CommandID: "c1", Reason: "poison ceiling exceeded"}})
	if len(r.Violations) != 0 || r.PoisonedByLostDeliveries != 1 {
		t.Fatalf("violations %v, poisoned by lost deliveries %d; want none and 1", r.Violations, r.PoisonedByLostDeliveries)
	}
}

// TestCheckPoisonedAfterSummarisedLostDeliveries: a delivery that finds
// more than 10 deliveries without an outcome records lease_lost for the
// last 10 and names the earlier ones in the first one's note (the
// processor's lostBefore); those count as lost deliveries too (the
// one-hour soak's no-op command dequeued 13 times under overload). The
// same history without the note is a violation.
func TestCheckPoisonedAfterSummarisedLostDeliveries(t *testing.T) {
	t.Parallel()
	for _, withNote := range []bool{true, false} {
		c := acceptedCmd("c1", "demo.echo", `{"n":3040}`, false)
		evs := []event{ev("1", "created", "", 0, 0)}
		for a := 3; a <= 12; a++ {
			e := ev(fmt.Sprint(a), "lease_lost", "w3.1", a, 0)
			if a == 3 && withNote {
				e.Note = "delivery 3 left no outcome (its processor lost the lease, stopped or crashed, or released it unstarted); the handler may have run; found by delivery 13 (deliveries 1-2 left none either)"
			}
			evs = append(evs, e)
		}
		evs = append(evs, event{Seq: "e:13", Kind: "poisoned", Worker: "w3.1", Attempt: 13, Reason: "poison ceiling exceeded"})
		h := &history{ID: "c1", Found: true, Status: "poisoned", Events: evs}
		r := runCheck(t, c, h, nil, fakeProcs{}, map[string]poisonEntry{"c1": {CommandID: "c1", Reason: "poison ceiling exceeded"}})
		if withNote && (len(r.Violations) != 0 || r.PoisonedByLostDeliveries != 1) {
			t.Fatalf("with the note: violations %v, poisoned by lost deliveries %d; want none and 1", r.Violations, r.PoisonedByLostDeliveries)
		}
		if !withNote && (len(r.Violations) != 1 || r.Violations[0].Invariant != InvDesignedOutcome) {
			t.Fatalf("without the note: violations %v, want one %s", r.Violations, InvDesignedOutcome)
		}
	}
}

func TestCheckFindsEachViolation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    *command
		h    *history
		xs   []*execution
		ps   fakeProcs
		pois map[string]poisonEntry
		want []string
	}{
		{
			name: "lost",
			c:    acceptedCmd("c1", "demo.echo", `{}`, false),
			h:    &history{ID: "c1"},
			want: []string{InvAcceptedFinal},
		},
		{
			name: "stranded",
			c:    acceptedCmd("c1", "demo.echo", `{}`, false),
			h:    &history{ID: "c1", Found: true, Status: "pending", Events: []event{ev("1", "created", "", 0, 0)}},
			want: []string{InvAcceptedFinal},
		},
		{
			name: "two completions and an unexplained overlap",
			c:    acceptedCmd("c1", "demo.sleep", `{"ms":10}`, false),
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "started", "w1.1", 1, 0), ev("3", "completed", "w1.1", 1, 0), ev("4", "started", "w2.1", 2, 0), ev("5", "completed", "w2.1", 2, 0)}},
			xs:   []*execution{run("w1.1", 1, 1, 1, 3, ""), run("w2.1", 2, 2, 2, 4, "")},
			want: []string{InvDuplicateExplained, InvSingleCompletion},
		},
		{
			name: "an event written twice by one attempt",
			c:    acceptedCmd("c1", "demo.steps", `{"steps":1}`, false),
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "started", "w1.1", 1, 0), ev("3", "step_completed", "w1.1", 1, 1), ev("4", "started", "w1.1", 1, 0),
				ev("5", "step_completed", "w1.1", 1, 1), ev("6", "completed", "w1.1", 1, 0)}},
			xs:   []*execution{run("w1.1", 1, 1, 1, 4, "", stepMark{2, 1, false}, stepMark{3, 1, true})},
			want: []string{InvEventOnce, InvEventOnce},
		},
		{
			name: "a recorded step run again",
			c:    acceptedCmd("c1", "demo.steps", `{"steps":2}`, false),
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "step_completed", "w1.1", 1, 1), ev("3", "failed", "w1.1", 1, 0),
				ev("4", "step_completed", "w2.1", 2, 1), ev("5", "step_completed", "w2.1", 2, 2), ev("6", "completed", "w2.1", 2, 0)}},
			xs: []*execution{run("w1.1", 1, 1, 1, 4, "boom", stepMark{2, 1, false}, stepMark{3, 1, true}),
				run("w2.1", 2, 2, 5, 10, "", stepMark{6, 1, false}, stepMark{7, 1, true}, stepMark{8, 2, false}, stepMark{9, 2, true})},
			want: []string{InvStepOnce, InvStepOnce},
		},
		{
			name: "poisoned though designed to complete, and no poison entry",
			c:    acceptedCmd("c1", "demo.fail", `{"times":1}`, false),
			h: &history{ID: "c1", Found: true, Status: "poisoned", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "started", "w1.1", 1, 0), {Seq: "e:3", Kind: "poisoned", Worker: "w1.1", Attempt: 1, Reason: "permanent error"}}},
			xs:   []*execution{run("w1.1", 1, 1, 1, 2, "x")},
			want: []string{InvDesignedOutcome, InvPoisonTable},
		},
		{
			name: "poisoned over the ceiling with a delivery lost unrecorded",
			c:    acceptedCmd("c1", "demo.sleep", `{"ms":10}`, false),
			h: &history{ID: "c1", Found: true, Status: "poisoned", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "lease_lost", "w1.2", 1, 0), ev("3", "lease_lost", "w1.2", 2, 0), ev("4", "lease_lost", "w1.2", 3, 0),
				ev("5", "lease_lost", "w1.2", 4, 0), {Seq: "e:6", Kind: "poisoned", Worker: "w1.2", Attempt: 6, Reason: "poison ceiling exceeded"}}},
			xs:   []*execution{run("w1.1", 1, 1, 1, -1, "")},
			pois: map[string]poisonEntry{"c1": {CommandID: "c1", Reason: "poison ceiling exceeded"}},
			want: []string{InvDesignedOutcome},
		},
		{
			name: "a poison entry for a completed command",
			c:    acceptedCmd("c1", "demo.echo", `{}`, false),
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "started", "w1.1", 1, 0), ev("3", "completed", "w1.1", 1, 0)}},
			xs:   []*execution{run("w1.1", 1, 1, 1, 2, "")},
			pois: map[string]poisonEntry{"c1": {CommandID: "c1", Reason: "x"}},
			want: []string{InvPoisonTable},
		},
		{
			name: "completed without a successful execution",
			c:    acceptedCmd("c1", "demo.echo", `{}`, false),
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "completed", "w1.1", 1, 0)}},
			xs:   []*execution{run("w1.1", 1, 1, 1, 2, "failed")},
			want: []string{InvCompletionBacked},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCheck(t, tc.c, tc.h, tc.xs, tc.ps, tc.pois)
			got := invariants(r)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("violations %v, want %v:\n%+v", got, tc.want, r.Violations)
			}
		})
	}
}

func TestCheckExplainsDuplicates(t *testing.T) {
	t.Parallel()
	c := acceptedCmd("c1", "demo.sleep", `{"ms":10}`, false)
	done := &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
		ev("2", "started", "w2.1", 2, 0), ev("3", "completed", "w2.1", 2, 0)}}
	killed := &proc{worker: "w1.1", killedAt: at(150)}
	for _, tc := range []struct {
		name     string
		h        *history
		xs       []*execution
		ps       fakeProcs
		explain  string
		violated bool
	}{
		{name: "lease_lost event", explain: "lease_lost",
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "started", "w1.1", 1, 0), ev("3", "lease_lost", "w1.1", 1, 0), ev("4", "started", "w2.1", 2, 0), ev("5", "completed", "w2.1", 2, 0)}},
			xs: []*execution{run("w1.1", 1, 1, 1, 3, ""), run("w2.1", 2, 2, 2, 4, "")}},
		{name: "lease_lost event written by the next worker", explain: "lease_lost",
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				ev("2", "lease_lost", "w2.1", 1, 0), ev("3", "started", "w2.1", 2, 0), ev("4", "completed", "w2.1", 2, 0)}},
			xs: []*execution{run("w1.1", 1, 1, 1, 3, ""), run("w2.1", 2, 2, 2, 4, "")}},
		{name: "lease_lost event written by a later delivery's worker", explain: "lease_lost",
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				evAt(ev("2", "lease_lost", "w3.1", 1, 0), 300), evAt(ev("3", "lease_lost", "w3.1", 2, 0), 300), ev("4", "started", "w3.1", 3, 0), ev("5", "completed", "w3.1", 3, 0)}},
			xs: []*execution{run("w1.1", 1, 1, 1, 3, ""), run("w2.1", 2, 2, 2, -1, "")}},
		{name: "lease_lost event of the same attempt number from before", violated: true,
			h: &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
				evAt(ev("2", "lease_lost", "w3.1", 1, 0), 0), ev("3", "started", "w2.1", 2, 0), ev("4", "completed", "w2.1", 2, 0)}},
			xs: []*execution{run("w1.1", 1, 1, 30, 32, ""), run("w2.1", 2, 2, 33, 34, "")}},
		{name: "SIGKILL before the rerun", explain: "crash", h: done,
			xs: []*execution{run("w1.1", 1, 1, 1, -1, ""), run("w2.1", 2, 2, 2, 3, "")},
			ps: fakeProcs{procs: map[string]*proc{"w1.1": killed}}},
		{name: "logged storage fault", explain: "fault", h: done,
			xs: []*execution{run("w1.1", 1, 1, 1, 2, ""), run("w2.1", 2, 2, 3, 4, "")},
			ps: fakeProcs{logs: []string{`w1.1: {"level":"error","op":"write completed","command":"c1","message":"cmdq processor: storage fault"}`}}},
		{name: "nothing", violated: true, h: done,
			xs: []*execution{run("w1.1", 1, 1, 1, 2, ""), run("w2.1", 2, 2, 3, 4, "")}},
		{name: "killed only after the rerun began", violated: true, h: done,
			xs: []*execution{run("w1.1", 1, 1, 1, -1, ""), run("w2.1", 2, 2, 1, 3, "")},
			ps: fakeProcs{procs: map[string]*proc{"w1.1": killed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCheck(t, c, tc.h, tc.xs, tc.ps, nil)
			if r.Extra != 1 {
				t.Fatalf("extra executions %d, want 1", r.Extra)
			}
			got := map[string]int{"lease_lost": r.ExplainedLeaseLost, "crash": r.ExplainedCrash, "fault": r.ExplainedFault}
			if tc.violated {
				if r.Unexplained != 1 || len(r.Violations) != 1 || r.Violations[0].Invariant != InvDuplicateExplained {
					t.Fatalf("unexplained %d, violations %v; want the duplicate reported", r.Unexplained, r.Violations)
				}
				return
			}
			if got[tc.explain] != 1 || r.Unexplained != 0 {
				t.Fatalf("explained %v, unexplained %d; want it explained by %s", got, r.Unexplained, tc.explain)
			}
		})
	}
}

func TestReadJournal(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	lines := []string{
		`{"t":"2026-01-02T03:04:05Z","pid":7,"worker":"w1.1","ev":"begin","id":"c1","type":"demo.steps","attempt":1}`,
		`{"t":"2026-01-02T03:04:05Z","pid":7,"worker":"w1.1","ev":"step","id":"c1","type":"demo.steps","attempt":1,"step":1}`,
		`{"t":"2026-01-02T03:04:05Z","pid":8,"worker":"w2.1","ev":"begin","id":"c1","type":"demo.steps","attempt":2,"last":1}`,
		`{"t":"2026-01-02T03:04:05Z","pid":7,"worker":"w1.1","ev":"stepped","id":"c1","type":"demo.steps","attempt":1,"step":1}`,
		`{"t":"2026-01-02T03:04:06Z","pid":7,"worker":"w1.1","ev":"end","id":"c1","type":"demo.steps","attempt":1,"err":"boom"}`,
		`not json`,
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := readJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	xs := j.byID["c1"]
	if j.lines != 6 || j.bad != 1 || len(xs) != 2 {
		t.Fatalf("lines %d bad %d executions %d; want 6, 1, 2", j.lines, j.bad, len(xs))
	}
	a, b := xs[0], xs[1]
	if a.Worker != "w1.1" || a.End != 5 || a.Err != "boom" || len(a.Steps) != 2 || !a.Steps[1].Recorded || a.Steps[1].Line != 4 {
		t.Fatalf("first execution %+v", a)
	}
	if b.Worker != "w2.1" || b.Last != 1 || b.End != -1 {
		t.Fatalf("second execution %+v", b)
	}
}

// TestCheckCancels: the cancel-respected invariant holds for a command
// cancelled before its handler ran and for one whose handler began before
// the cancel's answer, and fails for a handler that began well after the
// answer, for a 2xx cancel of a command that completed, and for a command
// cancelled without a cancel sent.
func TestCheckCancels(t *testing.T) {
	t.Parallel()
	cancelled := func() *history {
		return &history{ID: "c1", Found: true, Status: "cancelled", Events: []event{ev("1", "created", "", 0, 0), ev("2", "cancelled", "api:anonymous", 0, 0)}}
	}
	sent := func(code int, answeredMS int) *command {
		c := acceptedCmd("c1", "demo.sleep", `{"ms":1000}`, false)
		c.CancelAfter = time.Millisecond
		c.cancel = cancelState{sent: at(answeredMS - 50), tries: 1, code: code, answeredAt: at(answeredMS)}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *command
		h    *history
		xs   []*execution
		want []string
	}{
		{"cancelled before it ran", sent(202, 1000), cancelled(), nil, nil},
		{"began before the answer", sent(202, 1000), cancelled(), []*execution{run("w1.1", 1, 1, 5, -1, "")}, nil},
		{"began within the tolerance", sent(202, 1000), cancelled(), []*execution{run("w1.1", 1, 1, 19, -1, "")}, nil},
		{"began after the answer", sent(202, 1000), cancelled(), []*execution{run("w1.1", 1, 1, 25, -1, "")}, []string{InvCancelRespected}},
		{"2xx but completed", sent(202, 1000), &history{ID: "c1", Found: true, Status: "completed", Events: []event{
			ev("1", "created", "", 0, 0), ev("2", "started", "w1.1", 1, 0), ev("3", "completed", "w1.1", 1, 0)}},
			[]*execution{run("w1.1", 1, 1, 1, 2, "")}, []string{InvCancelRespected}},
		{"409 and completed", sent(409, 1000), &history{ID: "c1", Found: true, Status: "completed", Events: []event{
			ev("1", "created", "", 0, 0), ev("2", "started", "w1.1", 1, 0), ev("3", "completed", "w1.1", 1, 0)}},
			[]*execution{run("w1.1", 1, 1, 1, 2, "")}, nil},
		{"cancelled without a cancel", acceptedCmd("c1", "demo.sleep", `{"ms":1000}`, false), cancelled(), nil, []string{InvCancelRespected}},
	} {
		r := runCheck(t, tc.c, tc.h, tc.xs, fakeProcs{}, nil)
		if got := invariants(r); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: violations %v, want %v (%v)", tc.name, got, tc.want, r.Violations)
		}
	}
}

// TestCheckPauses: a handler that begins more than 10 s into a pause (and
// before the resume) breaks pause-respected; one that begins within the
// first 10 s, or after the resume, does not.
func TestCheckPauses(t *testing.T) {
	t.Parallel()
	c := acceptedCmd("c1", "demo.echo", `{}`, false)
	h := &history{ID: "c1", Found: true, Status: "completed", Events: []event{
		ev("1", "created", "", 0, 0), ev("2", "started", "w1.1", 1, 0), ev("3", "completed", "w1.1", 1, 0)}}
	for _, tc := range []struct {
		name  string
		begin int // ×100 ms
		want  []string
	}{
		{"within 10 s of the pause", 90, nil},
		{"more than 10 s into the pause", 120, []string{InvPauseRespected}},
		{"after the resume", 160, nil},
	} {
		snap := &snapshot{cmds: map[string]*history{c.ID: h}, poison: map[string]poisonEntry{}, markers: map[string]bool{}, messages: map[string]int{}}
		j := &journal{byID: map[string][]*execution{c.ID: {run("w1.1", 1, 1, tc.begin, tc.begin+1, "")}}}
		r := &Report{Faults: map[string]int{}, Pauses: []pauseWindow{{paused: at(0), resumeSent: at(15000)}}}
		check(r, []*command{c}, snap, j, fakeProcs{procs: map[string]*proc{}})
		if got := invariants(r); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: violations %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCheckSchedule: not-early holds for a command issued with a delay
// whose handler began at or after its runAt (also after a retry moved the
// row's runAt on) and for one still scheduled after the run; it breaks
// for a handler or a started event before runAt, for a runAt not stored,
// for a runAt that does not match the delay, and for a command due after
// the run that started anyway.
func TestCheckSchedule(t *testing.T) {
	t.Parallel()
	scheduled := func(delay time.Duration) *command {
		c := acceptedCmd("c1", "demo.sleep", `{"ms":10}`, false)
		c.Delay = delay
		return c
	}
	created := func(runAtMS int) event {
		e := ev("1", "created", "", 0, 0)
		e.Time, e.RunAt = at(0), at(runAtMS)
		return e
	}
	started := func(seq string, ms, attempt int) event {
		e := ev(seq, "started", "w1.1", attempt, 0)
		e.Time = at(ms)
		return e
	}
	completed := func(seq string, attempt int) event { return ev(seq, "completed", "w1.1", attempt, 0) }
	later := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name string
		c    *command
		h    *history
		xs   []*execution
		want []string
	}{
		{"began at its time", scheduled(2 * time.Second), &history{ID: "c1", Found: true, Status: "completed", RunAt: at(2000),
			Events: []event{created(2000), started("2", 2000, 1), completed("3", 1)}}, []*execution{run("w1.1", 1, 1, 20, 21, "")}, nil},
		{"a retry moved the row's runAt on", scheduled(2 * time.Second), &history{ID: "c1", Found: true, Status: "completed", RunAt: at(9000),
			Events: []event{created(2000), started("2", 2100, 1), ev("3", "failed", "w1.1", 1, 0), started("4", 9000, 2), completed("5", 2)}},
			[]*execution{run("w1.1", 1, 1, 21, 22, "planned"), run("w1.1", 1, 2, 90, 91, "")}, nil},
		{"handler began early", scheduled(2 * time.Second), &history{ID: "c1", Found: true, Status: "completed", RunAt: at(2000),
			Events: []event{created(2000), started("2", 2000, 1), completed("3", 1)}}, []*execution{run("w1.1", 1, 1, 19, 21, "")}, []string{InvNotEarly}},
		{"started event early", scheduled(2 * time.Second), &history{ID: "c1", Found: true, Status: "completed", RunAt: at(2000),
			Events: []event{created(2000), started("2", 1500, 1), completed("3", 1)}}, []*execution{run("w1.1", 1, 1, 20, 21, "")}, []string{InvNotEarly}},
		{"no runAt stored", scheduled(2 * time.Second), &history{ID: "c1", Found: true, Status: "completed",
			Events: []event{ev("1", "created", "", 0, 0), started("2", 2000, 1), completed("3", 1)}}, []*execution{run("w1.1", 1, 1, 20, 21, "")}, []string{InvNotEarly}},
		{"runAt does not match the delay", scheduled(2 * time.Second), &history{ID: "c1", Found: true, Status: "completed", RunAt: at(8000),
			Events: []event{created(8000), started("2", 8000, 1), completed("3", 1)}}, []*execution{run("w1.1", 1, 1, 80, 81, "")}, []string{InvNotEarly}},
		{"still scheduled", scheduled(stillScheduled), &history{ID: "c1", Found: true, Status: "pending", RunAt: later,
			Events: []event{{Seq: "e:1", Kind: "created", Time: at(0), RunAt: at(int(stillScheduled / time.Millisecond))}}}, nil, nil},
		{"due after the run but started", scheduled(stillScheduled), &history{ID: "c1", Found: true, Status: "pending", RunAt: later, Attempts: 1,
			Events: []event{{Seq: "e:1", Kind: "created", Time: at(0), RunAt: at(int(stillScheduled / time.Millisecond))}}}, []*execution{run("w1.1", 1, 1, 20, -1, "")}, []string{InvNotEarly, InvNotEarly}},
	} {
		r := runCheck(t, tc.c, tc.h, tc.xs, fakeProcs{}, nil)
		if got := invariants(r); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: violations %v, want %v (%v)", tc.name, got, tc.want, r.Violations)
		}
		if tc.c.Delay >= stillScheduled && tc.want == nil && r.StillScheduled != 1 {
			t.Errorf("%s: still scheduled %d, want 1", tc.name, r.StillScheduled)
		}
	}
}

// TestCheckDeferralIsARetry: an execution after a recorded deferral
// (RetryAfter) is a retry, as one after a failure is, not a duplicate to
// explain; without the deferred event it is one.
func TestCheckDeferralIsARetry(t *testing.T) {
	t.Parallel()
	c := acceptedCmd("c1", "demo.fail", `{"times":1,"deferMs":100}`, false)
	xs := []*execution{run("w1.1", 1, 1, 1, 2, "retry after 100ms"), run("w1.1", 2, 2, 3, 4, "")}
	h := &history{ID: "c1", Found: true, Status: "completed", Events: []event{ev("1", "created", "", 0, 0),
		ev("2", "started", "w1.1", 1, 0), ev("3", "deferred", "w1.1", 1, 0), ev("4", "started", "w1.1", 2, 0), ev("5", "completed", "w1.1", 2, 0)}}
	if r := runCheck(t, c, h, xs, fakeProcs{}, nil); r.Extra != 0 || len(r.Violations) != 0 {
		t.Fatalf("after a deferral: extra %d, violations %v; want a plain retry", r.Extra, r.Violations)
	}
	h.Events = append(h.Events[:2:2], h.Events[3:]...)
	if r := runCheck(t, c, h, xs, fakeProcs{}, nil); r.Extra != 1 || len(r.Violations) != 1 {
		t.Fatalf("without the deferred event: extra %d, violations %v; want an unexplained duplicate", r.Extra, r.Violations)
	}
}

// TestLoggedMetricsURL: the harness finds a spared worker's metrics URL
// in its log (the worker binds port 0 and logs where), the last one when
// it logged more than one, and none before it logged it.
func TestLoggedMetricsURL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w1.log")
	if got := loggedMetricsURL(path); got != "" {
		t.Fatalf("no log yet: %q", got)
	}
	log := `{"level":"info","msg":"cmdq worker: starting"}
{"level":"info","url":"http://127.0.0.1:40001/metrics","msg":"cmdq worker: serving metrics"}
{"level":"info","url":"http://127.0.0.1:8080","msg":"cmdq serve: listening"}
{"level":"info","url":"http://127.0.0.1:40002/metrics","msg":"cmdq worker: serving metrics"}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := loggedMetricsURL(path), "http://127.0.0.1:40002/metrics"; got != want {
		t.Fatalf("loggedMetricsURL = %q, want %q", got, want)
	}
}
