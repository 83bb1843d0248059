// Command schedtrace reads a Go execution trace (go test -trace, or
// runtime/trace) and reports, over a window of it, how the processors (Ps)
// were used: how long 0, 1, 2, … goroutines were running, how much P time
// sat idle while goroutines waited to run, and what was in a system call
// at those moments (a goroutine blocked in a system call keeps its P until
// the runtime takes it back). With -match, it reports instead the time the
// goroutines whose stack contains that function spent in each state
// (running, runnable, waiting and why, in a system call).
//
//	go test -run '^$' -bench 'BenchmarkProcess$' -benchtime 30000x -trace /tmp/p.trace ./internal/bench
//	cd tools/schedtrace && go run . -from 1.6 -to 3.2 /tmp/p.trace
//	go run . -from 1.6 -to 3.2 -match 'processor.(*Processor).poll' /tmp/p.trace
//
// The window is in seconds from the trace's first event; slice the trace
// into half seconds first (-step 0.5) to find the phase to look at.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

func main() {
	from := flag.Float64("from", 0, "window start, seconds from the trace's first event")
	to := flag.Float64("to", 1e9, "window end, seconds from the trace's first event")
	step := flag.Float64("step", 0, "if set, print the P use of each slice of this many seconds")
	match := flag.String("match", "", "report the states of the goroutines whose stack contains this function")
	procs := flag.Int("procs", 2, "GOMAXPROCS of the traced program")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: schedtrace [-from S] [-to S] [-step S] [-match FUNC] [-procs N] TRACE")
		os.Exit(2)
	}
	var err error
	switch {
	case *match != "":
		err = states(flag.Arg(0), *match, *from, *to)
	case *step > 0:
		for a := *from; a < *to; a += *step {
			var u *usage
			if u, err = use(flag.Arg(0), a, a+*step, *procs); err != nil || u.total == 0 {
				break
			}
			fmt.Printf("%6.2f–%6.2f s: ", a, a+*step)
			u.summary(*procs)
		}
	default:
		var u *usage
		if u, err = use(flag.Arg(0), *from, *to, *procs); err == nil {
			u.report(*procs)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedtrace:", err)
		os.Exit(1)
	}
}

// events calls fn for each event of the trace at path, with its time in
// seconds from the first event.
func events(path string, fn func(ev trace.Event, at float64)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return err
	}
	var start trace.Time
	first := true
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if first {
			start, first = ev.Time(), false
		}
		fn(ev, float64(ev.Time().Sub(start).Seconds()))
	}
}

// goTransition returns ev's goroutine and state change when ev is a
// goroutine's state change.
func goTransition(ev trace.Event) (trace.GoID, trace.StateTransition, bool) {
	if ev.Kind() != trace.EventStateTransition {
		return 0, trace.StateTransition{}, false
	}
	st := ev.StateTransition()
	if st.Resource.Kind != trace.ResourceGoroutine {
		return 0, trace.StateTransition{}, false
	}
	return st.Resource.Goroutine(), st, true
}

// usage is the time-weighted P use of a window.
type usage struct {
	total   float64         // window, ns
	running map[int]float64 // goroutines running → ns
	starved float64         // P-ns idle while a goroutine was runnable
	blame   map[string]float64
}

func use(path string, from, to float64, procs int) (*usage, error) {
	u := &usage{running: map[int]float64{}, blame: map[string]float64{}}
	var running, runnable int
	inSyscall := map[trace.GoID]string{}
	var last float64
	err := events(path, func(ev trace.Event, at float64) {
		if at > last && at > from && last < to {
			d := (min(at, to) - max(last, from)) * 1e9
			u.total += d
			u.running[running] += d
			if idle := procs - running - len(inSyscall); running < procs && runnable > 0 {
				// Ps not running Go code while goroutines wait: those
				// held by a system call, and those idle outright.
				u.starved += d * float64(min(procs-running, runnable))
				for _, what := range inSyscall {
					u.blame[what] += d * float64(min(procs-running, runnable)) / float64(len(inSyscall)+max(idle, 0))
				}
				if idle > 0 {
					u.blame["(no system call: an idle P not yet woken)"] += d * float64(min(idle, runnable))
				}
			}
		}
		last = at
		id, st, ok := goTransition(ev)
		if !ok {
			return
		}
		was, now := st.Goroutine()
		switch was {
		case trace.GoRunning:
			running--
		case trace.GoRunnable:
			runnable--
		case trace.GoSyscall:
			delete(inSyscall, id)
		}
		switch now {
		case trace.GoRunning:
			running++
		case trace.GoRunnable:
			runnable++
		case trace.GoSyscall:
			inSyscall[id] = syscallOf(ev.Stack())
		}
		running, runnable = max(running, 0), max(runnable, 0)
	})
	return u, err
}

// syscallOf names a system call by the first frame above the system call
// wrappers, and the wrapper under it.
func syscallOf(s trace.Stack) string {
	name := "?"
	for fr := range s.Frames() {
		f := fr.Func
		if strings.Contains(f, "syscall") || strings.HasPrefix(f, "golang.org/x/sys/unix.") || strings.Contains(f, "/vfs.") ||
			strings.HasPrefix(f, "os.") || strings.HasPrefix(f, "internal/poll.") {
			name = f
			continue
		}
		return name + " ← " + f
	}
	return name
}

func (u *usage) summary(procs int) {
	for n := 0; n <= procs; n++ {
		fmt.Printf("%d running %4.1f%%  ", n, 100*u.running[n]/u.total)
	}
	fmt.Printf("P time idle while goroutines waited %4.1f%%\n", 100*u.starved/u.total/float64(procs))
}

func (u *usage) report(procs int) {
	fmt.Printf("window %.2f s, %d Ps\n", u.total/1e9, procs)
	u.summary(procs)
	fmt.Println("held by, in P time while goroutines waited to run:")
	var ks []string
	for k := range u.blame {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return u.blame[ks[i]] > u.blame[ks[j]] })
	for i, k := range ks {
		if i == 12 {
			break
		}
		fmt.Printf("  %5.1f%%  %s\n", 100*u.blame[k]/u.total/float64(procs), k)
	}
}

// states reports the time the goroutines whose stack (at any of their
// state changes) contains match spent in each state within the window.
func states(path, match string, from, to float64) error {
	type state struct {
		name  string
		since float64
	}
	cur := map[trace.GoID]state{}
	marked := map[trace.GoID]bool{}
	acc := map[string]float64{}
	err := events(path, func(ev trace.Event, at float64) {
		id, st, ok := goTransition(ev)
		if !ok {
			return
		}
		where := ""
		for fr := range st.Stack.Frames() {
			if strings.Contains(fr.Func, match) {
				marked[id] = true
			}
			if where == "" && !strings.HasPrefix(fr.Func, "runtime.") && !strings.HasPrefix(fr.Func, "sync.") && !strings.HasPrefix(fr.Func, "internal/") {
				where = fr.Func
			}
		}
		if s, ok := cur[id]; ok && marked[id] {
			if d := min(at, to) - max(s.since, from); d > 0 {
				acc[s.name] += d
			}
		}
		_, now := st.Goroutine()
		name := now.String()
		if now == trace.GoWaiting || now == trace.GoSyscall {
			name += " (" + st.Reason + ") in " + where
		}
		cur[id] = state{name, at}
	})
	if err != nil {
		return err
	}
	var total float64
	var ks []string
	for k, v := range acc {
		ks = append(ks, k)
		total += v
	}
	sort.Slice(ks, func(i, j int) bool { return acc[ks[i]] > acc[ks[j]] })
	fmt.Printf("%d goroutines with %q on their stack, %.2f goroutine-seconds in the window\n", len(marked), match, total)
	for i, k := range ks {
		if i == 12 {
			break
		}
		fmt.Printf("  %5.1f%%  %s\n", 100*acc[k]/total, k)
	}
	return nil
}
