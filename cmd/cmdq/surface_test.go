package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCLIErrorMessages: errors say what is wrong once, in the CLI's
// words: no Go internals ("Go struct field demoSleep.ms of type int",
// printed twice), "connection refused" once, CLI commands rather than API
// paths, and no request line or HTTP status title in front.
func TestCLIErrorMessages(t *testing.T) {
	t.Parallel()
	p := startServe(t, serveOpts{})
	srv := []string{"--server", p.URL}
	check := func(what string, r result, wants []string, never ...string) {
		t.Helper()
		if r.code != 1 {
			t.Errorf("%s: exit %d, want 1\nstderr %s", what, r.code, r.stderr)
		}
		for _, w := range wants {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", what, w, r.stderr)
			}
		}
		for _, n := range append(never, "Go struct", "unmarshal", "/v1/", "GET http", "POST http", "400 Invalid", "404 Not found", "not found: ") {
			if strings.Contains(r.stderr, n) {
				t.Errorf("%s: stderr has %q:\n%s", what, n, r.stderr)
			}
		}
	}
	r := runCmdq(t, 30*time.Second, nil, append([]string{"send", "demo.sleep", "--params", `{"ms":"x"}`}, srv...)...)
	check("send with a string for ms", r, []string{`"ms"`, "whole number", "string"})
	if n := strings.Count(r.stderr, "whole number"); n != 1 {
		t.Errorf("the problem is said %d times:\n%s", n, r.stderr)
	}
	r = runCmdq(t, 30*time.Second, nil, append([]string{"send", "demo.sleep", "--params", `{"ms":1,"msec":2}`}, srv...)...)
	check("send with an unknown field", r, []string{`"msec"`, `"ms"`})

	id := newUUID()
	check("status of an unknown command", runCmdq(t, 30*time.Second, nil, append([]string{"status", id}, srv...)...), []string{"no command with this ID"})
	check("poison show of an unknown entry", runCmdq(t, 30*time.Second, nil, append([]string{"poison", "show", id}, srv...)...), []string{"cmdq poison ls"})
	sent := strings.TrimSpace(mustRun(t, nil, append([]string{"send", "demo.echo", "--wait"}, srv...)...).stdout)
	sent = strings.Fields(sent)[0]
	check("requeue of a completed command", runCmdq(t, 30*time.Second, nil, append([]string{"poison", "requeue", sent}, srv...)...), []string{"completed", "not poisoned"})

	// A server that is not there: said once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	r = runCmdq(t, 30*time.Second, nil, "status", id, "--server", "http://"+addr)
	check("status without a server", r, []string{"connection refused", "cmdq serve"})
	if n := strings.Count(r.stderr, "connection refused"); n != 1 {
		t.Errorf("\"connection refused\" %d times:\n%s", n, r.stderr)
	}
}

// TestUpperCaseIDs: one rule for command IDs in upper case: the API, the
// console and the CLI accept them and use the lower-case form (the CLI
// refused them, the console accepted them).
func TestUpperCaseIDs(t *testing.T) {
	t.Parallel()
	p := startServe(t, serveOpts{})
	srv := []string{"--server", p.URL}
	out := mustRun(t, nil, append([]string{"send", "demo.echo", "--wait"}, srv...)...)
	id := strings.Fields(out.stdout)[0]
	up := strings.ToUpper(id)

	st := mustRun(t, nil, append([]string{"status", up}, srv...)...)
	if !strings.Contains(st.stdout, id) || strings.Contains(st.stdout, up) {
		t.Errorf("cmdq status %s:\n%s", up, st.stdout)
	}
	if got := commandState(t, p.URL, "", up); got != "completed" {
		t.Errorf("GET /v1/commands/%s: %s", up, got)
	}
	r := do(t, http.MethodGet, p.URL+"/v1/commands/"+up, "", "")
	if !strings.Contains(r.body, `"id":"`+id+`"`) {
		t.Errorf("GET /v1/commands/%s answers %s", up, r.body)
	}
	if r := do(t, http.MethodGet, p.URL+"/ui/commands/"+up, "", ""); r.code != http.StatusOK || !strings.Contains(r.body, id) {
		t.Errorf("GET /ui/commands/%s: %d", up, r.code)
	}
	// Issuing with an upper-case id issues the lower-case one: sending it
	// again (either case) is the same command.
	newID := newUUID()
	again := mustRun(t, nil, append([]string{"send", "demo.echo", "--id", strings.ToUpper(newID)}, srv...)...)
	if strings.TrimSpace(again.stdout) != newID {
		t.Errorf("send --id %s printed %q, want %s", strings.ToUpper(newID), again.stdout, newID)
	}
	r2 := mustRun(t, nil, append([]string{"send", "demo.echo", "--id", newID}, srv...)...)
	if strings.TrimSpace(r2.stdout) != newID || !strings.Contains(r2.stderr, "already existed") {
		t.Errorf("the same id in lower case: %q %q", r2.stdout, r2.stderr)
	}
}

// TestSendWaitInterrupted: Ctrl-C (SIGINT) during send --wait says that the
// command goes on and how to follow it, and exits 130; the command is not
// touched.
func TestSendWaitInterrupted(t *testing.T) {
	t.Parallel()
	p := startServe(t, serveOpts{})
	cmd := exec.Command(binPath, "send", "demo.sleep", "--params", `{"ms":600000}`, "--wait", "--server", p.URL)
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no ID printed: %v; stderr %s", err, stderr.String())
	}
	id := strings.TrimSpace(line)
	// The ID is printed before the wait starts; the signal may come at
	// any point of it.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if code := exitCode(err); code != 130 {
		t.Fatalf("exit %d, want 130; stderr %s", code, stderr.String())
	}
	for _, want := range []string{"interrupted", id + " goes on", "cmdq status " + id + " --watch"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if st := commandState(t, p.URL, "", id); st != "pending" && st != "running" {
		t.Errorf("the command is %s after the interrupted wait", st)
	}
	mustRun(t, nil, "cancel", id, "--server", p.URL) // so that serve stops at once
}

// TestOneTimeFormat: every time the binary prints is UTC with millisecond
// precision, RFC 3339: /readyz printed nanoseconds (its detail's since),
// the logs whole seconds; the JSON API already gave milliseconds.
func TestOneTimeFormat(t *testing.T) {
	t.Parallel()
	p := startServe(t, serveOpts{})
	id := strings.Fields(mustRun(t, nil, "send", "demo.echo", "--wait", "--server", p.URL).stdout)[0]
	jsonTime := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$`)
	for _, path := range []string{"/readyz", "/healthz", "/v1/commands/" + id, "/v1/commands/" + id + "/events"} {
		r := do(t, http.MethodGet, p.URL+path, "", "")
		var v any
		if err := json.Unmarshal([]byte(r.body), &v); err != nil {
			t.Fatalf("%s: %v %s", path, err, r.body)
		}
		n := 0
		var walk func(k string, v any)
		walk = func(k string, v any) {
			switch v := v.(type) {
			case map[string]any:
				for k2, v2 := range v {
					walk(k2, v2)
				}
			case []any:
				for _, v2 := range v {
					walk(k, v2)
				}
			case string:
				if k == "since" || k == "time" || strings.HasSuffix(k, "At") {
					n++
					if !jsonTime.MatchString(v) {
						t.Errorf("%s: %s = %q, want RFC 3339 in UTC to the millisecond", path, k, v)
					}
				}
			}
		}
		walk("", v)
		if n == 0 {
			t.Errorf("%s: no time in %s", path, r.body)
		}
	}
	logTime := regexp.MustCompile(`"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"`)
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "{") && !logTime.MatchString(l) {
			t.Errorf("log line without a millisecond UTC time: %s", l)
		}
	}
}

// TestWatchSaysWhenDue: while status --watch waits on a retrying command,
// it says when the next attempt is due (the failed event's due time, the
// runAt that the processor records with a retry).
func TestWatchSaysWhenDue(t *testing.T) {
	t.Parallel()
	p := startServe(t, serveOpts{})
	id := strings.TrimSpace(mustRun(t, nil, "send", "demo.fail", "--params", `{"times":1}`, "--server", p.URL).stdout)
	r := mustRun(t, nil, "status", id, "--watch", "--server", p.URL)
	due := regexp.MustCompile(`failed\s+attempt 1\s+due \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z`)
	if !due.MatchString(r.stdout) || !strings.Contains(r.stdout, id+" completed (attempts 2)") {
		t.Errorf("status --watch of a command that fails once:\n%s", r.stdout)
	}
}
