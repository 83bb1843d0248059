package chaos

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// build compiles ./cmd/cmdq once per test binary into a temporary directory.
var build struct {
	once sync.Once
	path string
	err  error
}

// moduleRoot returns the directory holding go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Binary builds the cmdq binary (once per test binary) and returns its path.
// The directory it lives in is removed by Cleanup.
func Binary() (string, error) {
	build.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			build.err = err
			return
		}
		dir, err := os.MkdirTemp("", "cmdq-chaos-bin-")
		if err != nil {
			build.err = err
			return
		}
		out := filepath.Join(dir, "cmdq")
		goBin, err := exec.LookPath("go")
		if err != nil {
			build.err = fmt.Errorf("go not on PATH: %w", err)
			return
		}
		cmd := exec.Command(goBin, "build", "-o", out, "./cmd/cmdq")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/cmdq: %w\n%s", err, b)
			return
		}
		build.path = out
	})
	return build.path, build.err
}

// CleanupBinary removes the binary Binary built.
func CleanupBinary() {
	if build.path != "" {
		_ = os.RemoveAll(filepath.Dir(build.path))
	}
}

// proc is one incarnation of a cmdq process.
type proc struct {
	name    string // role: serve, w1, w2, …
	n       int    // incarnation, from 1
	worker  string // --worker-id
	pid     int
	log     string // path of its stderr+stdout
	started time.Time
	cmd     *exec.Cmd
	done    chan struct{}

	mu       sync.Mutex
	killedAt time.Time // zero unless the harness SIGKILLed it
	termAt   time.Time // zero unless the harness sent SIGTERM
	exitedAt time.Time
	exitErr  error
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// killed reports when the harness SIGKILLed this incarnation (zero if never).
func (p *proc) killed() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killedAt
}

// procs starts, kills and remembers every process of a run. Every process
// is started in its own process group (and, on Linux, dies with the test
// binary); killAll kills every group still running.
type procs struct {
	bin    string
	logDir string
	env    []string

	mu    sync.Mutex
	all   []*proc          // every incarnation ever started
	byWID map[string]*proc // by worker id (unique per incarnation; pids may be reused)
	cur   map[string]*proc // latest incarnation per role
	count map[string]int
	timeline

	indexOnce sync.Once
	index     map[string][]string // command ID → log lines naming it (grepLogs)
}

func newProcs(bin, logDir string, tl timeline) *procs {
	return &procs{bin: bin, logDir: logDir, env: cleanEnv(), byWID: map[string]*proc{}, cur: map[string]*proc{}, count: map[string]int{}, timeline: tl}
}

// cleanEnv is the environment without variables that would change how cmdq
// runs (CMDQ_*, AZURE_STORAGE_CONNECTION_STRING).
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CMDQ_") || strings.HasPrefix(kv, "AZURE_STORAGE_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// start starts a new incarnation of role with args (after the binary name;
// args may contain {worker}, replaced by the incarnation's worker id).
func (ps *procs) start(role string, args []string) (*proc, error) {
	ps.mu.Lock()
	ps.count[role]++
	n := ps.count[role]
	ps.mu.Unlock()
	worker := fmt.Sprintf("%s.%d", role, n)
	full := make([]string, len(args))
	for i, a := range args {
		full[i] = strings.ReplaceAll(a, "{worker}", worker)
	}
	logPath := filepath.Join(ps.logDir, worker+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(ps.bin, full...)
	cmd.Env = ps.env
	cmd.Stdout, cmd.Stderr = f, f
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", worker, err)
	}
	p := &proc{name: role, n: n, worker: worker, pid: cmd.Process.Pid, log: logPath, started: time.Now(), cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		p.mu.Lock()
		p.exitedAt, p.exitErr = time.Now(), err
		p.mu.Unlock()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.byWID[p.worker] = p
	ps.cur[role] = p
	ps.mu.Unlock()
	ps.logf("start %s pid %d", worker, p.pid)
	return p, nil
}

// current returns the latest incarnation of role (nil if none).
func (ps *procs) current(role string) *proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.cur[role]
}

// byWorker returns the incarnation with that worker id.
func (ps *procs) byWorker(worker string) *proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.byWID[worker]
}

// kill SIGKILLs p's process group and waits for it to exit. It reports
// whether p was still running (and so was killed now).
func (ps *procs) kill(p *proc, why string) bool {
	if !p.alive() {
		return false
	}
	p.mu.Lock()
	p.killedAt = time.Now()
	p.mu.Unlock()
	killGroup(p.cmd)
	<-p.done
	ps.logf("SIGKILL %s pid %d (%s)", p.worker, p.pid, why)
	return true
}

// stop sends SIGTERM and waits up to d for the process to exit, then kills it.
func (ps *procs) stop(p *proc, d time.Duration) {
	if !p.alive() {
		return
	}
	p.mu.Lock()
	p.termAt = time.Now()
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		ps.logf("stopped %s pid %d", p.worker, p.pid)
	case <-time.After(d):
		ps.kill(p, "did not stop within "+d.String())
	}
}

// killAll SIGKILLs every process still running.
func (ps *procs) killAll(why string) {
	ps.mu.Lock()
	all := append([]*proc(nil), ps.all...)
	ps.mu.Unlock()
	for _, p := range all {
		ps.kill(p, why)
	}
}

// incarnations returns every incarnation started, in start order.
func (ps *procs) incarnations() []*proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return append([]*proc(nil), ps.all...)
}

// grepLogs returns the log lines of every incarnation that contain s, each
// prefixed by the incarnation's worker id (at most max lines). A command ID
// is looked up in an index of the lines that name a command, built on the
// first call: call it once the processes have stopped.
func (ps *procs) grepLogs(s string, max int) []string {
	if isUUID(s) {
		ps.indexOnce.Do(ps.buildIndex)
		out := ps.index[s]
		if len(out) > max {
			out = out[:max]
		}
		return out
	}
	var out []string
	ps.scanLogs(func(worker string, line []byte) bool {
		if bytes.Contains(line, []byte(s)) {
			out = append(out, worker+": "+string(line))
		}
		return len(out) < max
	})
	return out
}

// scanLogs calls f for every line of every incarnation's log until f
// returns false.
func (ps *procs) scanLogs(f func(worker string, line []byte) bool) {
	for _, p := range ps.incarnations() {
		fh, err := os.Open(p.log)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			if !f(p.worker, sc.Bytes()) {
				_ = fh.Close()
				return
			}
		}
		_ = fh.Close()
	}
}

// buildIndex indexes the log lines that name a command ("command":"<id>").
func (ps *procs) buildIndex() {
	ps.index = map[string][]string{}
	key := []byte(`"command":"`)
	ps.scanLogs(func(worker string, line []byte) bool {
		if i := bytes.Index(line, key); i >= 0 && len(line) >= i+len(key)+36 {
			id := string(line[i+len(key) : i+len(key)+36])
			ps.index[id] = append(ps.index[id], worker+": "+string(line))
		}
		return true
	})
}

// isUUID reports whether s looks like a canonical UUID.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
	}
	return true
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// exitSummary describes how every incarnation ended, for the report.
func (ps *procs) exitSummary() (killed, selfExits int, notes []string) {
	for _, p := range ps.incarnations() {
		p.mu.Lock()
		k, term, e, at := p.killedAt, p.termAt, p.exitErr, p.exitedAt
		p.mu.Unlock()
		switch {
		case !k.IsZero():
			killed++
		case !term.IsZero():
		case !at.IsZero():
			selfExits++
			notes = append(notes, fmt.Sprintf("%s exited on its own after %s: %v; last log lines:\n%s", p.worker, at.Sub(p.started).Round(time.Millisecond), e, indent(tail(p.log, 5))))
		}
	}
	sort.Strings(notes)
	return killed, selfExits, notes
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// timeline is the run's log of what the harness did, with times; it goes to
// a file in the run directory and is printed when the run fails.
type timeline struct{ *timelineW }

type timelineW struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newTimeline(w io.Writer) timeline {
	return timeline{&timelineW{w: w, start: time.Now()}}
}

func (t timeline) logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%8.3fs %s %s\n", time.Since(t.start).Seconds(), time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
