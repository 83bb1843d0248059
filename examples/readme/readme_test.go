package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// region returns the lines of text between the line "// README:begin" and
// the line "// README:end".
func region(t *testing.T, text string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "// README:begin\n")
	body, _, ok2 := strings.Cut(rest, "// README:end\n")
	if !ok || !ok2 {
		t.Fatal("main.go lacks the README:begin and README:end lines")
	}
	return strings.TrimSpace(body)
}

// readmeBlock returns the first ```go block of the README's "Use it from
// Go" section.
func readmeBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Use it from Go\n")
	if !ok {
		t.Fatal(`README.md has no "## Use it from Go" section`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	_, code, ok := strings.Cut(sec, "```go\n")
	code, _, ok2 := strings.Cut(code, "```")
	if !ok || !ok2 {
		t.Fatal(`the "Use it from Go" section has no go code block`)
	}
	return strings.TrimSpace(code)
}

// TestReadmeIsThisProgram: the README's Go block is this program's marked
// region, so it compiles (go vet and the build of this package) and runs
// (TestRuns).
func TestReadmeIsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readmeBlock(t), region(t, string(src)); got != want {
		t.Fatalf("README.md's Go block differs from examples/readme/main.go between the README markers; copy the region into the README.\nREADME:\n%s\n\nmain.go:\n%s", got, want)
	}
}

// TestRuns runs the program in a temporary directory: it prints the
// command's final state.
func TestRuns(t *testing.T) {
	t.Chdir(t.TempDir())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	main()
	os.Stdout = stdout
	_ = w.Close()
	var out bytes.Buffer
	_, _ = io.Copy(&out, r)
	if got := strings.TrimSpace(out.String()); got != "images.resize completed" {
		t.Fatalf("the program printed %q, want \"images.resize completed\"", got)
	}
}
