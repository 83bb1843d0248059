package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const (
	readmePath = "../../README.md"
	// cliDocPath is the CLI's page, with the main flags' table.
	cliDocPath  = "../../docs/cli.md"
	configPath  = "../../docs/configuration.md"
	tourHeading = "## Two-minute tour"
	// tourBase is the server address the README's commands use.
	tourBase = "http://127.0.0.1:8080"
	// goRunCmdq starts a CLI line in the README.
	goRunCmdq = "go run ./cmd/cmdq "
)

// tourStep is one command of the README tour: a curl request with its
// expected answer, or a cmdq CLI invocation that must exit 0.
type tourStep struct {
	line     int // line number in README.md
	text     string
	cli      []string // arguments after `cmdq` for a CLI line
	method   string
	url      string
	headers  [][2]string
	body     string
	wantCode int
	wantFrag []string
}

// section returns the text of the markdown section starting at heading, and
// the line number of its first line.
func section(t *testing.T, doc, heading string) (string, int) {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	rest := doc[i+1:]
	if j := strings.Index(rest[len(heading):], "\n## "); j >= 0 {
		rest = rest[:len(heading)+j]
	}
	return rest, strings.Count(doc[:i+1], "\n") + 1
}

// shellWords splits one (joined) shell line into words, honouring single
// and double quotes and dropping a trailing comment.
func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				cur.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, fmt.Errorf("unterminated \" in %q", line)
			}
			inWord = true
		case c == '#' && !inWord:
			return words, nil
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

var expectRE = regexp.MustCompile(`^# → (\d{3})(?: (.*))?$`)

// parseTour reads the ```sh blocks of the tour section.
func parseTour(t *testing.T, readme string) []tourStep {
	t.Helper()
	sec, first := section(t, readme, tourHeading)
	lines := strings.Split(sec, "\n")
	var steps []tourStep
	inBlock := false
	for i := 0; i < len(lines); i++ {
		ln := first + i
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "```") {
			inBlock = !inBlock && l == "```sh"
			continue
		}
		if !inBlock || l == "" {
			continue
		}
		if m := expectRE.FindStringSubmatch(l); m != nil {
			if len(steps) == 0 || steps[len(steps)-1].cli != nil || steps[len(steps)-1].wantCode != 0 {
				t.Fatalf("README.md:%d: expectation %q does not follow a curl command", ln, l)
			}
			s := &steps[len(steps)-1]
			s.wantCode, _ = strconv.Atoi(m[1])
			if m[2] != "" {
				s.wantFrag = strings.Split(m[2], " and ")
			}
			continue
		}
		if strings.HasPrefix(l, "#") {
			continue
		}
		full := l
		for strings.HasSuffix(full, "\\") && i+1 < len(lines) {
			i++
			full = strings.TrimSuffix(full, "\\") + " " + strings.TrimSpace(lines[i])
		}
		step := tourStep{line: ln, text: full}
		switch {
		case strings.HasPrefix(full, "curl "):
			words, err := shellWords(full)
			if err != nil {
				t.Fatalf("README.md:%d: %v", ln, err)
			}
			step.method = http.MethodGet
			for j := 1; j < len(words); j++ {
				w := words[j]
				switch {
				case w == "-s" || w == "-i" || w == "-si" || w == "-N":
				case (w == "-X" || w == "-H" || w == "-d") && j+1 < len(words):
					j++
					switch w {
					case "-X":
						step.method = words[j]
					case "-H":
						k, v, ok := strings.Cut(words[j], ":")
						if !ok {
							t.Fatalf("README.md:%d: header %q has no colon", ln, words[j])
						}
						step.headers = append(step.headers, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
					case "-d":
						step.body = words[j]
						if step.method == http.MethodGet {
							step.method = http.MethodPost
						}
					}
				case strings.HasPrefix(w, tourBase):
					step.url = w
				default:
					t.Fatalf("README.md:%d: the tour test does not understand curl argument %q; keep the tour to -s, -i, -N, -X, -H, -d and %s URLs", ln, w, tourBase)
				}
			}
			if step.url == "" {
				t.Fatalf("README.md:%d: curl command without a %s URL", ln, tourBase)
			}
		case strings.HasPrefix(full, goRunCmdq):
			words, err := shellWords(strings.TrimPrefix(full, goRunCmdq))
			if err != nil {
				t.Fatalf("README.md:%d: %v", ln, err)
			}
			step.cli = words
		default:
			t.Fatalf("README.md:%d: the tour test runs only curl and %q lines, not %q", ln, goRunCmdq, full)
		}
		steps = append(steps, step)
	}
	for _, s := range steps {
		if s.cli == nil && s.wantCode == 0 {
			t.Fatalf("README.md:%d: curl command without a following `# → CODE` expectation", s.line)
		}
	}
	return steps
}

func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

// TestReadmeTour runs the README's two-minute tour against a real `cmdq
// serve` with default settings (embedded store, demo handlers): every curl
// request must get the status code and body fragments the README shows
// (GET requests are repeated until they do, as the README tells readers),
// and every CLI line must exit 0.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	steps := parseTour(t, string(readme))
	// The tour must keep covering what the issue asks for.
	var all strings.Builder
	for _, s := range steps {
		all.WriteString(s.text + "\n")
	}
	for _, want := range []string{`"type":"demo.echo"`, `"type":"demo.fail","params":{"times":10}`, `"type":"demo.steps"`,
		"/v1/poison", "/requeue", "/events", "Accept: text/event-stream", "-X DELETE", goRunCmdq + "send", goRunCmdq + "status", goRunCmdq + "poison ls", goRunCmdq + "ls --state"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("README tour no longer contains %q", want)
		}
	}
	// A reader following the tour sees the status codes it promises, and
	// learns how to reach a server on another port.
	for _, s := range steps {
		if s.cli == nil && !strings.HasPrefix(s.text, "curl -si ") && !strings.HasPrefix(s.text, "curl -i ") {
			t.Errorf("README.md:%d: %q prints no status code; use curl -si", s.line, s.text)
		}
	}
	if sec, _ := section(t, string(readme), tourHeading); !strings.Contains(sec, "--server") || !strings.Contains(sec, "CMDQ_SERVER") {
		t.Error("the README tour does not say how to reach a server on another port (--server, CMDQ_SERVER)")
	}

	srv := startServe(t, serveOpts{})
	for _, s := range steps {
		if s.cli != nil {
			r := runCmdq(t, 30*time.Second, []string{"CMDQ_SERVER=" + srv.URL}, s.cli...)
			if r.code != 0 {
				t.Fatalf("README.md:%d: %s: exit %d\nstdout:\n%s\nstderr:\n%s", s.line, s.text, r.code, r.stdout, r.stderr)
			}
			t.Logf("README.md:%d: cmdq %s\n%s", s.line, strings.Join(s.cli, " "), r.stdout)
			continue
		}
		url := srv.URL + strings.TrimPrefix(s.url, tourBase)
		var hdr []string
		for _, h := range s.headers {
			hdr = append(hdr, h[0], h[1])
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := do(t, s.method, url, "", s.body, hdr...)
			body := compactJSON(r.body)
			ok := r.code == s.wantCode
			for _, f := range s.wantFrag {
				ok = ok && strings.Contains(body, f)
			}
			if ok {
				break
			}
			if s.method != http.MethodGet || time.Now().After(deadline) {
				t.Fatalf("README.md:%d: %s %s\n got %d %s\nwant %d with %q", s.line, s.method, s.url, r.code, body, s.wantCode, s.wantFrag)
			}
			time.Sleep(100 * time.Millisecond) // the README says: repeat until it matches
		}
	}
}

// configRow is one row of a flag table in README.md.
var configRow = regexp.MustCompile("^\\| `(--[a-z-]+)` \\| `(CMDQ_[A-Z_]+)` \\| ([^|]+) \\| ([^|]+) \\|$")

// TestCLIDocConfigTable checks docs/cli.md's table of the main flags (it was the README's) against the
// binary's flags: each flag exists on the commands listed, its environment
// variable is the one applyEnv reads, and the default is the flag's default.
func TestCLIDocConfigTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	rows := 0
	for i, l := range strings.Split(string(doc), "\n") {
		m := configRow.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		rows++
		flag, env, def, cmds := strings.TrimPrefix(m[1], "--"), m[2], strings.TrimSpace(m[3]), strings.TrimSpace(m[4])
		if envName(flag) != env {
			t.Errorf("docs/cli.md:%d: --%s reads %s, not %s", i+1, flag, envName(flag), env)
		}
		for _, name := range strings.Split(cmds, ",") {
			c, _, err := root.Find([]string{strings.TrimSpace(name)})
			if err != nil || c == root {
				t.Errorf("docs/cli.md:%d: no command %q", i+1, name)
				continue
			}
			targets := []*cobra.Command{c}
			if c.HasSubCommands() {
				targets = c.Commands() // poison: ls, show, requeue, rm
			}
			for _, c := range targets {
				checkDefault(t, i+1, c, flag, def)
			}
		}
	}
	if rows < 10 {
		t.Fatalf("found only %d configuration rows in docs/cli.md", rows)
	}
}

// checkDefault checks one row's default against command c's flag.
func checkDefault(t *testing.T, line int, c *cobra.Command, flag, def string) {
	t.Helper()
	i := line - 1
	f := lookupFlag(c, flag)
	if f == nil {
		t.Errorf("docs/cli.md:%d: cmdq %s has no --%s", i+1, c.CommandPath(), flag)
		return
	}
	want := ""
	if strings.HasPrefix(def, "`") {
		want = strings.Trim(strings.Fields(def)[0], "`")
	} else if !strings.HasPrefix(def, "(none") {
		t.Errorf("docs/cli.md:%d: default %q is neither `value` nor (none…)", i+1, def)
	}
	if f.DefValue != want {
		t.Errorf("docs/cli.md:%d: %s --%s defaults to %q, docs/cli.md says %q", i+1, c.CommandPath(), flag, f.DefValue, want)
	}
}

func lookupFlag(c *cobra.Command, name string) *pflag.Flag {
	if f := c.Flags().Lookup(name); f != nil {
		return f
	}
	return c.InheritedFlags().Lookup(name)
}

// TestConfigurationDocCoversEveryFlag checks that docs/configuration.md names
// every flag of serve, worker, send, status and poison with its environment
// variable and default.
func TestConfigurationDocCoversEveryFlag(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			row := regexp.MustCompile("(?m)^\\| `--" + regexp.QuoteMeta(f.Name) + "` \\| `" + envName(f.Name) + "` \\| ([^|]+) \\|")
			m := row.FindStringSubmatch(text)
			if m == nil {
				t.Errorf("docs/configuration.md has no row for --%s (%s) of cmdq %s", f.Name, envName(f.Name), c.Name())
				return
			}
			def := strings.TrimSpace(m[1])
			want := "`" + f.DefValue + "`"
			if f.DefValue == "" {
				if !strings.HasPrefix(def, "(none") {
					t.Errorf("docs/configuration.md: --%s has no default, the doc says %s", f.Name, def)
				}
			} else if !strings.HasPrefix(def, want) {
				t.Errorf("docs/configuration.md: --%s defaults to %s, the doc says %s", f.Name, want, def)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range newRootCmd().Commands() {
		// bench (added by cmd/cmdq/bench.go) documents its own flags.
		if c.Name() != "bench" && c.Name() != "help" && c.Name() != "completion" {
			walk(c)
		}
	}
}
