package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// pgUsers are the candidates to run PostgreSQL when the harness runs as
// root (PostgreSQL refuses to): Debian's postgresql package creates
// "postgres"; cmdq-peers is created when neither exists.
var pgUsers = []string{"postgres", "cmdq-peers"}

// server is a process the harness started, in its own process group (so a
// Ctrl-C at the terminal reaches the harness, which stops it in order) and
// killed by the kernel if the harness dies (Pdeathsig).
type server struct {
	name string
	cmd  *exec.Cmd
	log  string // its log file
	// stopSig asks it to stop (PostgreSQL: SIGINT, fast shutdown).
	stopSig syscall.Signal
	exited  chan struct{}
	err     error
}

func startServer(name, logPath string, stopSig syscall.Signal, cred *syscall.Credential, dir string, bin string, args ...string) (*server, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	s := &server{name: name, cmd: cmd, log: logPath, stopSig: stopSig, exited: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.exited) }()
	return s, nil
}

// stop asks the server to stop and kills its process group if it has not
// within 30 s.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(s.stopSig)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
}

// logTail returns the end of the server's log, for error messages.
func (s *server) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// services are the Redis and PostgreSQL servers of a run.
type services struct {
	dir      string
	redis    *server
	postgres *server

	RedisAddr   string // host:port
	PostgresURL string // postgres://…/postgres
}

// services are started by startServicesFor (main.go): Redis without
// persistence, PostgreSQL with fsync on and synchronous_commit on, on free
// loopback ports in a new temporary directory. Close stops them and removes
// the directory; it is safe after a failed start.

// Dir is the temporary directory (the cmdq stores go there too).
func (sv *services) Dir() string { return sv.dir }

// Close stops the servers and removes the temporary directory.
func (sv *services) Close() {
	if sv.postgres != nil {
		sv.postgres.stop()
	}
	if sv.redis != nil {
		sv.redis.stop()
	}
	_ = os.RemoveAll(sv.dir)
}

func (sv *services) startRedis(ctx context.Context, logf func(string, ...any)) error {
	bin, err := findRedis()
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	rdir := filepath.Join(sv.dir, "redis")
	if err := os.Mkdir(rdir, 0o700); err != nil {
		return fmt.Errorf("redis directory: %w", err)
	}
	sv.RedisAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logf("starting %s on %s (no persistence) in %s", bin, sv.RedisAddr, rdir)
	sv.redis, err = startServer("redis-server", filepath.Join(rdir, "redis.log"), syscall.SIGTERM, nil, rdir, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", rdir,
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: sv.RedisAddr})
	defer func() { _ = rdb.Close() }()
	return sv.redis.waitReady(ctx, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
}

func (sv *services) startPostgres(ctx context.Context, logf func(string, ...any)) error {
	bindir, err := findPostgres()
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	pdir := filepath.Join(sv.dir, "postgres")
	if err := os.Mkdir(pdir, 0o700); err != nil {
		return fmt.Errorf("postgres directory: %w", err)
	}
	var cred *syscall.Credential
	runAs := ""
	if os.Geteuid() == 0 {
		u, err := pgRunUser(logf)
		if err != nil {
			return err
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		if err := os.Chown(pdir, int(uid), int(gid)); err != nil {
			return fmt.Errorf("postgres directory: %w", err)
		}
		runAs = " as user " + u.Username
	}
	data := filepath.Join(pdir, "data")
	logf("initdb %s%s", data, runAs)
	initdb := exec.CommandContext(ctx, filepath.Join(bindir, "initdb"), "-D", data, "-U", "bench", "--auth=trust",
		"--encoding=UTF8", "--no-sync")
	initdb.Dir = pdir
	initdb.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	var out bytes.Buffer
	initdb.Stdout, initdb.Stderr = &out, &out
	if err := initdb.Run(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out.String())
	}
	// The defaults are kept; the durability settings are named so the table
	// can say what it measured.
	logf("starting %s/postgres on 127.0.0.1:%d%s (fsync on, synchronous_commit on)", bindir, port, runAs)
	sv.postgres, err = startServer("postgres", filepath.Join(pdir, "postgres.log"), syscall.SIGINT, cred, pdir,
		filepath.Join(bindir, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "fsync=on", "-c", "synchronous_commit=on")
	if err != nil {
		return err
	}
	sv.PostgresURL = fmt.Sprintf("postgres://bench@127.0.0.1:%d/postgres?sslmode=disable", port)
	return sv.postgres.waitReady(ctx, func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, sv.PostgresURL)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
}

// waitReady calls ping every 100 ms until it succeeds, the server exits,
// ctx ends or a minute passes.
func (s *server) waitReady(ctx context.Context, ping func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited (%v); its log:\n%s", s.name, s.err, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within a minute (%v); its log:\n%s", s.name, err, s.logTail())
		}
	}
}

// pgRunUser returns the unprivileged user PostgreSQL runs as under root,
// creating cmdq-peers (a system user without a home or login shell) when
// no candidate exists.
func pgRunUser(logf func(string, ...any)) (*user.User, error) {
	for _, name := range pgUsers {
		if u, err := user.Lookup(name); err == nil {
			return u, nil
		}
	}
	name := pgUsers[len(pgUsers)-1]
	logf("creating system user %s to run PostgreSQL (it refuses to run as root)", name)
	out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
		"--shell", "/usr/sbin/nologin", name).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root, and creating user %s failed: %w\n%s", name, err, out)
	}
	return user.Lookup(name)
}

// findRedis returns the redis-server binary.
func findRedis() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server", nil
	}
	return "", errors.New("redis-server not found: install it (Debian: apt-get install redis-server; make bench-peers does this) or pass --redis-addr")
}

// findPostgres returns the directory of the newest PostgreSQL's binaries:
// /usr/lib/postgresql/<version>/bin (Debian), else pg_config --bindir.
func findPostgres() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var ok []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				ok = append(ok, d)
			}
		}
	}
	if len(ok) > 0 {
		version := func(d string) int {
			v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			return v
		}
		slices.SortFunc(ok, func(a, b string) int { return version(a) - version(b) })
		return ok[len(ok)-1], nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL server not found in /usr/lib/postgresql/*/bin: install it (Debian: apt-get install postgresql; make bench-peers does this) or pass --postgres-url")
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
