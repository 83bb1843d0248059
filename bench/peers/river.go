package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverPoolConns is the pgx pool size: enough for 16 issuing goroutines plus
// River's own connections (fetches, completer, listener, leader election).
// pgxpool's default, max(4, cores), would cap the issuers at 4.
const riverPoolConns = 40

// riverSystem is River on PostgreSQL. Each run gets a fresh database
// (CREATE DATABASE, River's migrations), dropped afterwards.
type riverSystem struct {
	adminURL string // a database URL of the server (any database)
	// FetchCooldown and FetchPollInterval: zero keeps River's defaults
	// (100 ms, 1 s).
	fetchCooldown, fetchPollInterval time.Duration
	// batch, if set, makes this an issue-only row using InsertMany (or
	// InsertManyFast when fast).
	batch, fast bool
	batchSize   int
	durable     string
	logger      *slog.Logger
}

func (s *riverSystem) Name() string { return "River" }

func (s *riverSystem) Config() string {
	switch {
	case s.batch && s.fast:
		return fmt.Sprintf("batch insert: InsertManyFast (COPY FROM), %s jobs a call", group(float64(s.batchSize)))
	case s.batch:
		return fmt.Sprintf("batch insert: InsertMany, %s jobs a call", group(float64(s.batchSize)))
	case s.fetchCooldown == 0 && s.fetchPollInterval == 0:
		return "defaults (FetchCooldown 100 ms, FetchPollInterval 1 s)"
	default:
		return fmt.Sprintf("FetchCooldown %s, FetchPollInterval %s", s.fetchCooldown, s.fetchPollInterval)
	}
}

func (s *riverSystem) Durable() string { return s.durable }

func (s *riverSystem) IssueOnly() bool { return s.batch }

// riverArgs are the job's arguments.
type riverArgs job

// Kind implements river.JobArgs.
func (riverArgs) Kind() string { return "peers_noop" }

// riverWorker calls onStart and returns.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	onStart func(job)
}

func (w *riverWorker) Work(_ context.Context, j *river.Job[riverArgs]) error {
	w.onStart(job(j.Args))
	return nil
}

var riverDBs atomic.Int64

type riverInstance struct {
	s      *riverSystem
	admin  *pgx.Conn
	dbName string
	pool   *pgxpool.Pool
	// insert is an insert-only client (not started); the running client is
	// used instead while one runs, as an application inserting and working
	// in one process would.
	insert  *river.Client[pgx.Tx]
	running atomic.Pointer[river.Client[pgx.Tx]]
	onStart atomic.Pointer[func(job)]
}

func (s *riverSystem) Open(ctx context.Context, run int) (instance, error) {
	admin, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	in := &riverInstance{s: s, admin: admin, dbName: fmt.Sprintf("peers_river_%d_%d", os.Getpid(), riverDBs.Add(1))}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+in.dbName); err != nil {
		_ = admin.Close(ctx)
		return nil, fmt.Errorf("create database: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(s.adminURL)
	if err != nil {
		_ = in.Close(ctx)
		return nil, fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	cfg.ConnConfig.Database = in.dbName
	cfg.MaxConns = riverPoolConns
	if in.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		_ = in.Close(ctx)
		return nil, fmt.Errorf("pool: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(in.pool), nil)
	if err != nil {
		_ = in.Close(ctx)
		return nil, fmt.Errorf("migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		_ = in.Close(ctx)
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if in.insert, err = in.client(1); err != nil {
		_ = in.Close(ctx)
		return nil, err
	}
	return in, nil
}

// client makes a client with maxWorkers workers on the default queue whose
// worker calls the current onStart.
func (in *riverInstance) client(maxWorkers int) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{onStart: func(j job) {
		if f := in.onStart.Load(); f != nil {
			(*f)(j)
		}
	}})
	c, err := river.NewClient(riverpgxv5.New(in.pool), &river.Config{
		FetchCooldown:     in.s.fetchCooldown,
		FetchPollInterval: in.s.fetchPollInterval,
		Logger:            in.s.logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return c, nil
}

func (in *riverInstance) Issue(ctx context.Context, j job) error {
	c := in.running.Load()
	if c == nil {
		c = in.insert
	}
	_, err := c.Insert(ctx, riverArgs(j), nil)
	return err
}

func (in *riverInstance) IssueBatch(ctx context.Context, jobs []job) error {
	ps := make([]river.InsertManyParams, len(jobs))
	for i, j := range jobs {
		ps[i] = river.InsertManyParams{Args: riverArgs(j)}
	}
	if in.s.fast {
		_, err := in.insert.InsertManyFast(ctx, ps)
		return err
	}
	_, err := in.insert.InsertMany(ctx, ps)
	return err
}

func (in *riverInstance) Start(ctx context.Context, workers int, onStart func(job)) (runner, error) {
	in.onStart.Store(&onStart)
	c, err := in.client(workers)
	if err != nil {
		return nil, err
	}
	// Completion events are sent once the completer has written the
	// completed state; the channel is drained at once so none is dropped.
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: 100_000})
	r := &riverRunner{in: in, c: c, cancelSub: cancel}
	r.wg.Go(func() {
		for range events {
			r.completed.Add(1)
		}
	})
	if err := c.Start(ctx); err != nil {
		cancel()
		r.wg.Wait()
		return nil, fmt.Errorf("start river client: %w", err)
	}
	in.running.Store(c)
	return r, nil
}

func (in *riverInstance) Close(ctx context.Context) error {
	if in.pool != nil {
		in.pool.Close()
	}
	var err error
	if _, derr := in.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+in.dbName+" WITH (FORCE)"); derr != nil {
		err = fmt.Errorf("drop database: %w", derr)
	}
	if cerr := in.admin.Close(ctx); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

type riverRunner struct {
	in        *riverInstance
	c         *river.Client[pgx.Tx]
	cancelSub func()
	completed atomic.Int64
	wg        sync.WaitGroup
}

func (r *riverRunner) WaitCompleted(ctx context.Context, n int64) error {
	return waitCount(ctx, n, r.completed.Load)
}

func (r *riverRunner) Stop(ctx context.Context) error {
	r.in.running.CompareAndSwap(r.c, nil)
	err := r.c.Stop(ctx)
	r.cancelSub()
	r.wg.Wait()
	if err != nil {
		return fmt.Errorf("stop river client: %w", err)
	}
	return nil
}

// postgresDurability reads fsync and synchronous_commit from the server and
// returns the durable column and the server's version.
func postgresDurability(ctx context.Context, url string) (durable, version string, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", "", fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var fsync, sync string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('server_version')").Scan(&fsync, &sync, &version); err != nil {
		return "", "", fmt.Errorf("read PostgreSQL settings: %w", err)
	}
	durable = "no"
	if fsync == "on" && sync != "off" {
		durable = "yes"
	}
	version = strings.Fields(version)[0]
	return fmt.Sprintf("%s: PostgreSQL fsync=%s, synchronous_commit=%s", durable, fsync, sync), version, nil
}
