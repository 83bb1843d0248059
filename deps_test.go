package cmdq_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goCmd runs the go command in dir and returns its output.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// toolModules are development tools' modules that must stay out of what a
// program importing cmdq builds.
var toolModules = []string{"honnef.co/go/tools", "golang.org/x/tools"}

func requireNoTools(t *testing.T, what, list string, modules ...string) {
	t.Helper()
	for _, line := range strings.Split(list, "\n") {
		for _, m := range modules {
			if strings.HasPrefix(strings.TrimSpace(line), m) {
				t.Errorf("%s includes %s", what, strings.TrimSpace(line))
			}
		}
	}
}

// TestOutsideModule builds, lists and tests a small module outside this one
// that imports cmdq, a store driver and the test kit (cmdqtest) the way a
// user's program does: its dependencies hold no development tool
// (staticcheck, x/tools), and the test kit works there (no Azurite, nothing
// found relative to cmdq's go.mod). It uses the configured module proxy:
// a fresh module cache lacks go.mod files of that module's graph which
// cmdq's own build never reads (it failed offline on a new machine).
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not with -short")
	}
	t.Parallel()
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/outside\n\ngo 1.26\n\nrequire github.com/cmdq-dev/cmdq v0.0.0\n\nreplace github.com/cmdq-dev/cmdq => " + repo + "\n",
		"go.sum": string(sum),
		"main.go": `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

type Hello struct{ Name string }

func (Hello) CommandType() string { return "outside.hello" }

func handle(ctx context.Context, h Hello, run *cmdq.Attempt) error {
	fmt.Println("hello,", h.Name)
	return nil
}

func main() {
	st, err := embedded.Open(os.Args[1], nil)
	if err != nil {
		panic(err)
	}
	defer st.Close()
	c, err := cmdq.New(st, cmdq.Config{})
	if err != nil {
		panic(err)
	}
	if err := cmdq.Register(c, handle); err != nil {
		panic(err)
	}
}
`,
		"main_test.go": `package main

import (
	"context"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtest"
)

func TestHello(t *testing.T) {
	c := cmdqtest.New(t)
	if err := cmdq.Register(c, handle); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(context.Background(), Hello{Name: "outside"})
	if err != nil {
		t.Fatal(err)
	}
	cmdqtest.Drain(t, c)
	cmdqtest.RequireState(t, c, res.ID, cmdq.StateCompleted)
}
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "CMDQ_REQUIRE_AZURITE=", "AZURE_STORAGE_CONNECTION_STRING="}
	requireNoTools(t, "go list -deps of a program importing cmdq", goCmd(t, dir, env, "list", "-deps", "-test", "."), toolModules...)
	// x/tools may be named by other modules' go.mod files (x/net's); a
	// staticcheck requirement would come from cmdq's own.
	requireNoTools(t, "the module graph of a program importing cmdq", goCmd(t, dir, env, "list", "-m", "all"), "honnef.co/")
	out := goCmd(t, dir, env, "test", "-count=1", ".")
	if !strings.Contains(out, "ok") {
		t.Fatalf("the outside module's test: %s", out)
	}
}

// TestNoToolDirective: go.mod declares no tool (they would enter every
// importer's module graph); the Makefile runs staticcheck with go run.
func TestNoToolDirective(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "tool ") || strings.TrimSpace(line) == "tool (" {
			t.Errorf("go.mod declares a tool: %q; run it with `go run pkg@version` (Makefile)", line)
		}
	}
	requireNoTools(t, "go list -deps of package cmdq", goCmd(t, ".", nil, "list", "-deps", ".", "./storage/embedded", "./storage/azure", "./cmdqtest"), toolModules...)
}

// TestNoCompiledBinaries: no file git tracks is a compiled program (ELF,
// Mach-O or a Windows PE): build outputs stay out of the repository
// (.gitignore covers the examples' and the peer harness's).
func TestNoCompiledBinaries(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v (the test needs the git checkout)", err)
	}
	magics := map[string][]byte{
		"ELF":     {0x7f, 'E', 'L', 'F'},
		"Mach-O":  {0xcf, 0xfa, 0xed, 0xfe},
		"Mach-O ": {0xfe, 0xed, 0xfa, 0xcf},
		"PE":      {'M', 'Z'},
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(name)
		if err != nil {
			continue // deleted in the work tree
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		_ = f.Close()
		for kind, m := range magics {
			if n >= len(m) && string(head[:len(m)]) == string(m) {
				t.Errorf("%s is a compiled %s binary: git rm it and ignore its build output", name, strings.TrimSpace(kind))
			}
		}
	}
}

// TestLibraryUsesOTelAPIOnly: the library's packages depend on the
// OpenTelemetry API only (otel, otel/trace, otel/propagation,
// otel/attribute, otel/codes): the SDK, the exporters and the OTLP
// protobufs are for programs that choose them (cmd/cmdq, tests), so a
// program that does not trace pays nothing for them.
func TestLibraryUsesOTelAPIOnly(t *testing.T) {
	t.Parallel()
	out := goCmd(t, ".", nil, "list", "-deps", ".", "./api", "./console", "./client", "./cmdqtest", "./metrics",
		"./storage/embedded", "./storage/azure")
	api := false
	for _, line := range strings.Split(out, "\n") {
		p := strings.TrimSpace(line)
		switch {
		case p == "go.opentelemetry.io/otel/trace":
			api = true
		case strings.HasPrefix(p, "go.opentelemetry.io/otel/sdk"), strings.HasPrefix(p, "go.opentelemetry.io/otel/exporters"),
			strings.HasPrefix(p, "go.opentelemetry.io/proto"), strings.HasPrefix(p, "google.golang.org/grpc"):
			t.Errorf("the library depends on %s; only the OpenTelemetry API belongs in it", p)
		}
	}
	if !api {
		t.Error("the library does not depend on go.opentelemetry.io/otel/trace: is tracing built in?")
	}
}

// TestOutsideTestKit runs examples/testkit, a module of its own that tests
// its handlers with cmdqtest only, the way a program's module does: copied
// to a temporary directory with its replace directive pointing at this
// checkout (and cmdq's go.sum), `go test` there must pass: a handler that
// always fails is poisoned after 5 attempts with Drain under 2 s of wall
// time, and a command scheduled an hour ahead runs when the test moves
// the clock. Its figures are logged.
func TestOutsideTestKit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not with -short")
	}
	t.Parallel()
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join("examples", "testkit")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "go.mod" {
			b = []byte(strings.Replace(string(b), "=> ../..", "=> "+repo, 1))
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "CMDQ_REQUIRE_AZURITE=", "AZURE_STORAGE_CONNECTION_STRING="}
	out := goCmd(t, dir, env, "test", "-count=1", "-v", ".")
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "payment_test.go") {
			t.Log(strings.TrimSpace(line))
		}
	}
	for _, name := range []string{"TestPoisonedAfterFiveAttempts", "TestScheduledHourAhead"} {
		if !strings.Contains(out, "--- PASS: "+name) {
			t.Errorf("examples/testkit: %s did not pass:\n%s", name, out)
		}
	}
}
