// Command convertfiles shows a resumable multi-step command on the embedded
// store: a ConvertBatch command converts a list of files one by one, records a
// step after each file, and, when an attempt fails part-way (input file 30 is
// "locked" the first time it is opened), the retry resumes at the file that
// failed instead of converting the first 29 files again.
//
// Run it with:
//
//	go run ./examples/convertfiles
//	go run ./examples/convertfiles -files 50 -fail-at 30 -format reverse
//
// It opens an embedded store in a temporary directory, creates the input files,
// starts a cmdq.Client with the handler, issues one ConvertBatch command, waits
// until it reaches a final state, and prints the command's status, its event
// timeline and how many times each file was converted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// ConvertBatch is the command: convert each input file to Format, writing the
// result into the output directory. Files are names relative to the input
// directory; the steps of the command are the files, numbered from 1.
type ConvertBatch struct {
	// Files are the input file names, converted in this order.
	Files []string `json:"files"`
	// Format is "upper" (upper-case the text) or "reverse" (reverse each
	// line). Any other format is a permanent error: the command is poisoned.
	Format string `json:"format"`
}

// CommandType names the command type.
func (ConvertBatch) CommandType() string { return "files.convert-batch" }

// Options configures Run. Zero fields take the defaults named on each field.
type Options struct {
	// Dir is the working directory: the store (cmdq-data), the input and the
	// output directories go under it. Default: a new temporary directory,
	// removed when Run returns.
	Dir string
	// Files is the number of input files to create and convert. Default 40.
	Files int
	// FailAt is the 1-based file that is locked the first time it is
	// opened, so the first attempt fails there. Default 30; negative: no
	// file is locked.
	FailAt int
	// Format is the conversion format. Default "upper".
	Format string
	// Timeout bounds the whole run. Default 30 s.
	Timeout time.Duration
}

// Report is what Run observed.
type Report struct {
	// ID is the command ID.
	ID string
	// Status is the command's final status.
	Status cmdq.Status
	// Events is the command's event timeline, oldest first.
	Events []cmdq.Event
	// Conversions counts, per input file name, how many times it was
	// converted (written to the output directory).
	Conversions map[string]int
	// InputDir and OutputDir are where the files are (gone after Run if
	// Options.Dir was empty).
	InputDir, OutputDir string
}

// errLocked is the transient failure of a locked input file.
var errLocked = errors.New("file is locked by another process")

// converter does the real I/O of the handler and counts conversions.
type converter struct {
	in, out string

	mu     sync.Mutex
	locked map[string]bool // files still locked (unlocked after the first open)
	counts map[string]int  // conversions per file
}

// convert converts one file, or fails if it is still locked (once).
func (c *converter) convert(name, format string) error {
	c.mu.Lock()
	if c.locked[name] {
		delete(c.locked, name) // the other process lets go of it later
		c.mu.Unlock()
		return fmt.Errorf("open %s: %w", name, errLocked)
	}
	c.mu.Unlock()

	data, err := os.ReadFile(filepath.Join(c.in, name))
	if err != nil {
		return fmt.Errorf("read input: %w", err)
	}
	var outText string
	switch format {
	case "upper":
		outText = strings.ToUpper(string(data))
	case "reverse":
		lines := strings.Split(string(data), "\n")
		for i, l := range lines {
			r := []rune(l)
			slices.Reverse(r)
			lines[i] = string(r)
		}
		outText = strings.Join(lines, "\n")
	default:
		// Retrying cannot fix an unknown format: poison the command at once.
		return cmdq.Permanent(fmt.Errorf("unknown format %q: use \"upper\" or \"reverse\"", format))
	}
	outName := filepath.Join(c.out, name+"."+format)
	if err := os.WriteFile(outName, []byte(outText), 0o644); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	c.mu.Lock()
	c.counts[name]++
	c.mu.Unlock()
	return nil
}

// retryFast is the handler's options: a lease of 10 s and retries 100 ms
// apart at first (the default starts at 1 s).
var retryFast = cmdq.HandlerOptions{
	Lease: 10 * time.Second,
	Retry: cmdq.RetryPolicy{Base: 100 * time.Millisecond, Max: time.Second},
}

// handle is the ConvertBatch handler: it starts after the last completed step
// (0 on the first attempt) and records a step after each converted file, so a
// retry resumes at the file that failed.
func (c *converter) handle(ctx context.Context, cmd ConvertBatch, run *cmdq.Attempt) error {
	for i := run.LastStep() + 1; i <= len(cmd.Files); i++ {
		name := cmd.Files[i-1]
		if err := c.convert(name, cmd.Format); err != nil {
			return fmt.Errorf("file %d of %d: %w", i, len(cmd.Files), err)
		}
		if err := run.CompleteStep(ctx, i, "converted "+name); err != nil {
			return fmt.Errorf("record step %d: %w", i, err)
		}
	}
	return nil
}

// Run opens an embedded store, creates the input files, issues one
// ConvertBatch command, processes it until it is completed or poisoned, and
// writes the status and timeline to w.
func Run(ctx context.Context, opts Options, w io.Writer) (*Report, error) {
	if opts.Files == 0 {
		opts.Files = 40
	}
	if opts.FailAt == 0 {
		opts.FailAt = 30
	}
	if opts.Format == "" {
		opts.Format = "upper"
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Files < 1 {
		return nil, fmt.Errorf("convertfiles: Files must be at least 1, got %d", opts.Files)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "cmdq-convertfiles-")
		if err != nil {
			return nil, fmt.Errorf("convertfiles: temp dir: %w", err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		opts.Dir = dir
	}
	rep := &Report{
		InputDir:  filepath.Join(opts.Dir, "in"),
		OutputDir: filepath.Join(opts.Dir, "out"),
	}
	files, err := makeInputs(rep.InputDir, opts.Files)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(rep.OutputDir, 0o755); err != nil {
		return nil, fmt.Errorf("convertfiles: output dir: %w", err)
	}
	conv := &converter{in: rep.InputDir, out: rep.OutputDir, locked: map[string]bool{}, counts: map[string]int{}}
	if opts.FailAt >= 1 && opts.FailAt <= len(files) {
		conv.locked[files[opts.FailAt-1]] = true
	}

	// 1. Storage: one data directory, no server.
	st, err := embedded.Open(filepath.Join(opts.Dir, "cmdq-data"), nil)
	if err != nil {
		return nil, fmt.Errorf("convertfiles: open store: %w", err)
	}
	defer func() { _ = st.Close() }()

	// 2. The client: its processor polls fast while the example runs (the
	// default backoff goes up to a minute, which suits production, not a
	// demo).
	c, err := cmdq.New(st, cmdq.Config{
		Worker:          "convertfiles",
		MinPollInterval: 20 * time.Millisecond,
		MaxPollInterval: 200 * time.Millisecond,
		DrainTimeout:    5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("convertfiles: %w", err)
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()

	// 3. The typed handler, with a short retry delay so the example
	// finishes in about a second (the default starts at 1 s).
	if err := cmdq.RegisterWith(c, conv.handle, retryFast); err != nil {
		return nil, fmt.Errorf("convertfiles: register: %w", err)
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("convertfiles: start: %w", err)
	}

	// 4. Issue: the in-process processor is woken at once.
	res, err := c.Issue(ctx, ConvertBatch{Files: files, Format: opts.Format})
	if err != nil {
		return nil, fmt.Errorf("convertfiles: issue: %w", err)
	}
	rep.ID = res.ID
	fmt.Fprintf(w, "issued %s %s (%d files, format %s)\n", ConvertBatch{}.CommandType(), res.ID, len(files), opts.Format)

	// 5. Wait until it is completed or poisoned, then read its history.
	rep.Status, err = c.Wait(ctx, res.ID)
	if err != nil {
		return rep, fmt.Errorf("convertfiles: %w", err)
	}
	rep.Events, err = c.Events(ctx, res.ID)
	if err != nil {
		return rep, fmt.Errorf("convertfiles: events: %w", err)
	}
	conv.mu.Lock()
	rep.Conversions = conv.counts
	conv.mu.Unlock()

	printReport(w, rep, files)
	return rep, nil
}

// makeInputs creates n small text files in dir and returns their names.
func makeInputs(dir string, n int) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("convertfiles: input dir: %w", err)
	}
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("file-%03d.txt", i+1)
		text := fmt.Sprintf("this is input file %d\nit has two lines\n", i+1)
		if err := os.WriteFile(filepath.Join(dir, names[i]), []byte(text), 0o644); err != nil {
			return nil, fmt.Errorf("convertfiles: create input: %w", err)
		}
	}
	return names, nil
}

// printReport writes the status, the event timeline and the conversion counts.
func printReport(w io.Writer, rep *Report, files []string) {
	s := rep.Status
	fmt.Fprintf(w, "\nstatus:   %s\nattempts: %d\nstep:     %d of %d\n", s.State, s.Attempts, s.Step, len(files))
	if s.LastError != "" {
		fmt.Fprintf(w, "last error: %s\n", s.LastError)
	}
	fmt.Fprintf(w, "took:     %s\n\ntimeline:\n", s.UpdatedAt.Sub(s.CreatedAt).Round(time.Millisecond))
	for _, e := range rep.Events {
		line := fmt.Sprintf("  %+8.3fs  #%-3d %-15s", e.Time.Sub(s.CreatedAt).Seconds(), e.Seq, e.Kind)
		if e.Attempt > 0 {
			line += fmt.Sprintf(" attempt %d", e.Attempt)
		}
		if e.Step > 0 {
			line += fmt.Sprintf(" step %-3d", e.Step)
		}
		for _, t := range []string{e.Note, e.Error, e.Reason} {
			if t != "" {
				line += "  " + t
			}
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	once, more, never := 0, 0, 0
	for _, f := range files {
		switch n := rep.Conversions[f]; {
		case n == 1:
			once++
		case n > 1:
			more++
		default:
			never++
		}
	}
	fmt.Fprintf(w, "\nconversions: %d files converted exactly once, %d more than once, %d never\n", once, more, never)
}

func main() {
	var opts Options
	flag.IntVar(&opts.Files, "files", 40, "number of input files")
	flag.IntVar(&opts.FailAt, "fail-at", 30, "file locked on the first attempt (-1: none)")
	flag.StringVar(&opts.Format, "format", "upper", `conversion format: "upper" or "reverse"`)
	flag.StringVar(&opts.Dir, "dir", "", "working directory (default: a temporary directory, removed at the end)")
	flag.DurationVar(&opts.Timeout, "timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	if _, err := Run(context.Background(), opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
