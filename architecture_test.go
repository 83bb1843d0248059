package cmdq_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cmdq-dev/cmdq"

// short returns a package path relative to the module ("cmdq" for the
// root).
func short(path string) string {
	if path == module {
		return "cmdq"
	}
	return strings.TrimPrefix(path, module+"/")
}

var backticked = regexp.MustCompile("`([^`]+)`")

// TestArchitectureTable checks docs/architecture.md's package table against
// go list: every package of the module has a row, and every package imports
// (outside its tests) only module packages its row allows.
func TestArchitectureTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| package | owns | imports |")
	if !ok {
		t.Fatal("docs/architecture.md has no table headed | package | owns | imports |")
	}
	allowed := map[string][]string{} // package → allowed imports; nil = anything
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("table row %q does not have 3 cells", line)
		}
		var imports []string
		switch v := strings.TrimSpace(cells[2]); v {
		case "anything":
			imports = nil
		case "—":
			imports = []string{}
		default:
			for _, p := range strings.Split(v, ",") {
				imports = append(imports, strings.TrimSpace(p))
			}
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			allowed[m[1]] = imports
		}
	}
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		name := short(p.ImportPath)
		may, ok := allowed[name]
		if !ok {
			t.Errorf("package %s has no row in docs/architecture.md's table", name)
			continue
		}
		if may == nil {
			continue
		}
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if !slices.Contains(may, short(imp)) {
				t.Errorf("package %s imports %s, which docs/architecture.md does not allow (it allows: %s)", name, short(imp), strings.Join(may, ", "))
			}
		}
	}
	if seen < 20 {
		t.Fatalf("go list listed %d packages; expected the whole module", seen)
	}
}

// publicPackages are the packages a user imports: the front door, storage
// and its drivers, the HTTP API, the console, the Go client, the metrics
// and the test kit. Everything else is under
// internal/, cmd/, examples/ or bench/.
var publicPackages = []string{
	"api", "client", "cmdq", "cmdqtest", "console", "metrics",
	"storage", "storage/azure", "storage/embedded", "storage/instrument", "storage/multi", "storage/storagetest",
}

// TestPublicPackages: the module's packages outside internal/, cmd/,
// examples/ and bench/ are exactly publicPackages (issue 17: the engine is
// not importable by users), and none of them imports internal/engine but
// the front door.
func TestPublicPackages(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var public []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		name := short(fields[0])
		if strings.HasPrefix(name, "internal/") || strings.HasPrefix(name, "cmd/") || strings.HasPrefix(name, "examples/") || strings.HasPrefix(name, "bench/") {
			continue
		}
		public = append(public, name)
		if name == "cmdq" {
			continue
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module+"/internal/engine") {
				t.Errorf("public package %s imports the engine (%s); stand on the front door (package cmdq)", name, short(imp))
			}
		}
	}
	slices.Sort(public)
	if !slices.Equal(public, publicPackages) {
		t.Errorf("public packages %v, want %v", public, publicPackages)
	}
}
