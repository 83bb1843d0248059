package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqSystem is asynq on Redis. Each run starts from an empty Redis
// (FLUSHALL).
type asynqSystem struct {
	addr string
	// taskCheckInterval: zero keeps asynq's default (1 s): how long the
	// processor sleeps (×0.5..1.5) after finding every queue empty.
	taskCheckInterval time.Duration
	// appendfsync, if set, turns on Redis's append-only file with this
	// fsync policy ("always" or "everysec") for this row's runs.
	appendfsync string
}

func (s *asynqSystem) Name() string { return "asynq" }

func (s *asynqSystem) Config() string {
	c := "defaults (TaskCheckInterval 1 s)"
	if s.taskCheckInterval != 0 {
		c = fmt.Sprintf("TaskCheckInterval %s", s.taskCheckInterval)
	}
	if s.appendfsync != "" {
		c += ", Redis appendonly yes, appendfsync " + s.appendfsync
	}
	return c
}

func (s *asynqSystem) Durable() string {
	switch s.appendfsync {
	case "":
		return "no: Redis without persistence (asynq's default deployment; no RDB, no AOF)"
	case "always":
		return "yes: Redis AOF, fsync before each reply batch (appendfsync always)"
	default:
		return fmt.Sprintf("up to 1 s lost: Redis AOF, appendfsync %s", s.appendfsync)
	}
}

const asynqTaskType = "peers:noop"

type asynqInstance struct {
	s      *asynqSystem
	rdb    *redis.Client
	client *asynq.Client
	insp   *asynq.Inspector
}

func (s *asynqSystem) Open(ctx context.Context, run int) (instance, error) {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	in := &asynqInstance{s: s, rdb: rdb}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("flush Redis: %w", err)
	}
	if err := setAppendOnly(ctx, rdb, s.appendfsync); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	opt := asynq.RedisClientOpt{Addr: s.addr}
	in.client = asynq.NewClient(opt)
	in.insp = asynq.NewInspector(opt)
	return in, nil
}

// setAppendOnly turns Redis's append-only file on with policy fsync, or
// off when fsync is empty, and waits for the rewrite that turning it on
// starts.
func setAppendOnly(ctx context.Context, rdb *redis.Client, fsync string) error {
	if fsync == "" {
		if err := rdb.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
			return fmt.Errorf("redis appendonly no: %w", err)
		}
		return nil
	}
	if err := rdb.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
		return fmt.Errorf("redis appendfsync %s: %w", fsync, err)
	}
	if err := rdb.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		return fmt.Errorf("redis appendonly yes: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := rdb.Info(ctx, "persistence").Result()
		if err != nil {
			return fmt.Errorf("redis info persistence: %w", err)
		}
		if strings.Contains(info, "aof_enabled:1") && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			strings.Contains(info, "aof_rewrite_scheduled:0") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis: the append-only file was not ready within a minute:\n%s", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (in *asynqInstance) Issue(_ context.Context, j job) error {
	payload, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = in.client.Enqueue(asynq.NewTask(asynqTaskType, payload))
	return err
}

func (in *asynqInstance) Start(_ context.Context, workers int, onStart func(job)) (runner, error) {
	r := &asynqRunner{in: in}
	info, err := in.insp.GetQueueInfo("default")
	if err != nil {
		return nil, fmt.Errorf("asynq queue info: %w", err)
	}
	r.base = int64(info.ProcessedTotal)
	r.srv = asynq.NewServer(asynq.RedisClientOpt{Addr: in.s.addr}, asynq.Config{
		Concurrency:       workers,
		TaskCheckInterval: in.s.taskCheckInterval,
		LogLevel:          asynq.WarnLevel,
	})
	err = r.srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		var j job
		if err := json.Unmarshal(t.Payload(), &j); err != nil {
			return fmt.Errorf("peers: payload: %w", err)
		}
		onStart(j)
		r.returned.Add(1)
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("start asynq server: %w", err)
	}
	return r, nil
}

func (in *asynqInstance) Close(ctx context.Context) error {
	err := in.client.Close()
	if ierr := in.insp.Close(); err == nil {
		err = ierr
	}
	if in.s.appendfsync != "" {
		if aerr := setAppendOnly(ctx, in.rdb, ""); err == nil {
			err = aerr
		}
	}
	if rerr := in.rdb.Close(); err == nil {
		err = rerr
	}
	return err
}

type asynqRunner struct {
	in       *asynqInstance
	srv      *asynq.Server
	base     int64 // the queue's processed total at Start
	returned atomic.Int64
}

// WaitCompleted waits until n handlers have returned, then until asynq has
// acknowledged them (the task removed from Redis and counted as processed,
// which asynq does after the handler returns).
func (r *asynqRunner) WaitCompleted(ctx context.Context, n int64) error {
	if err := waitCount(ctx, n, r.returned.Load); err != nil {
		return err
	}
	var ierr error
	err := waitCount(ctx, n, func() int64 {
		info, err := r.in.insp.GetQueueInfo("default")
		if err != nil {
			ierr = err
			return 0
		}
		return int64(info.ProcessedTotal) - r.base
	})
	if err != nil && ierr != nil {
		return fmt.Errorf("%w (last queue info error: %v)", err, ierr)
	}
	return err
}

func (r *asynqRunner) Stop(context.Context) error {
	r.srv.Shutdown()
	return nil
}

// redisInfo returns the Redis server's version.
func redisInfo(ctx context.Context, addr string) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis info: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "?", nil
}
