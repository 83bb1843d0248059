package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/v2"
	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
)

// rawResult is the raw pipeline's throughput.
type rawResult struct{ issuedPerS, processedPerS float64 }

// rawBaseline is the minimal command pipeline written directly against the
// Azure SDK, with no status history, retries, poison handling or leases
// renewed: issue = insert the parameters entity + enqueue {"id","type"};
// process = dequeue up to BatchSize, and per message read the parameters
// (point read), write a status entity (upsert), delete the message. Like the
// processor, one poller fetches the next batch when the messages in flight
// drop to BatchSize/2, and Concurrency goroutines handle them.
func rawBaseline(ctx context.Context, conn string, cfg Config) (rawResult, error) {
	var res rawResult
	qsvc, err := azqueue.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return res, fmt.Errorf("bench: raw baseline: queue client: %w", err)
	}
	tsvc, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return res, fmt.Errorf("bench: raw baseline: table client: %w", err)
	}
	name := "raw" + strings.TrimPrefix(cfg.Prefix, "bench")
	q := qsvc.NewQueueClient(name)
	if _, err := q.Create(ctx, nil); err != nil {
		return res, fmt.Errorf("bench: raw baseline: create queue %s: %w", name, err)
	}
	tbl := tsvc.NewClient(name)
	if _, err := tbl.CreateTable(ctx, nil); err != nil {
		return res, fmt.Errorf("bench: raw baseline: create table %s: %w", name, err)
	}
	defer func() {
		_, _ = q.Delete(context.Background(), nil)
		_, _ = tbl.Delete(context.Background(), nil)
	}()

	// Issue.
	ictx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var errOnce sync.Once
	var first error
	fail := func(err error) {
		errOnce.Do(func() { first = err; cancel() })
	}
	params, _ := json.Marshal(benchCmd{Seq: 1})
	began := time.Now()
	for range cfg.Issuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for int(next.Add(1)) <= cfg.N && ictx.Err() == nil {
				id := uuid.NewString()
				ent, _ := json.Marshal(map[string]any{
					"PartitionKey": id, "RowKey": "cmd", "Type": "bench.noop", "Params": string(params),
				})
				if _, err := tbl.AddEntity(ictx, ent, nil); err != nil {
					fail(fmt.Errorf("bench: raw baseline: insert: %w", err))
					return
				}
				msg := layout.Envelope{ID: id, Type: "bench.noop"}.Marshal()
				if _, err := q.EnqueueMessage(ictx, msg, nil); err != nil {
					fail(fmt.Errorf("bench: raw baseline: enqueue: %w", err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return res, first
	}
	res.issuedPerS = float64(cfg.N) / time.Since(began).Seconds()

	// Process.
	pctx, pcancel := context.WithTimeout(ctx, cfg.Timeout)
	defer pcancel()
	var done atomic.Int64
	var inflight atomic.Int64
	work := make(chan *azqueue.DequeuedMessage, cfg.BatchSize*2)
	capacity := make(chan struct{}, 1)
	threshold := int64(cfg.BatchSize / 2)
	first = nil
	errOnce = sync.Once{}
	failP := func(err error) {
		errOnce.Do(func() { first = err; pcancel() })
	}
	handle := func(m *azqueue.DequeuedMessage) error {
		env, err := layout.ParseEnvelope(*m.MessageText)
		if err != nil {
			return err
		}
		if _, err := tbl.GetEntity(pctx, env.ID, "cmd", nil); err != nil {
			return fmt.Errorf("read parameters: %w", err)
		}
		st, _ := json.Marshal(map[string]any{
			"PartitionKey": env.ID, "RowKey": "status", "Status": "completed",
			"UpdatedAt": time.Now().UTC(), "Attempts": 1,
		})
		if _, err := tbl.UpsertEntity(pctx, st, nil); err != nil {
			return fmt.Errorf("write status: %w", err)
		}
		if _, err := q.DeleteMessage(pctx, *m.MessageID, *m.PopReceipt, nil); err != nil {
			return fmt.Errorf("delete message: %w", err)
		}
		return nil
	}
	var workers sync.WaitGroup
	for range cfg.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for m := range work {
				if err := handle(m); err != nil {
					failP(fmt.Errorf("bench: raw baseline: %w", err))
				} else {
					done.Add(1)
				}
				if inflight.Add(-1) <= threshold {
					select {
					case capacity <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	began = time.Now()
	n := int32(cfg.BatchSize)
	vis := int32(30)
	wait := 10 * time.Millisecond
poll:
	for done.Load() < int64(cfg.N) && pctx.Err() == nil {
		for inflight.Load() > threshold {
			select {
			case <-capacity:
			case <-pctx.Done():
				break poll
			}
		}
		resp, err := q.DequeueMessages(pctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: &n, VisibilityTimeout: &vis})
		if err != nil {
			if pctx.Err() == nil {
				failP(fmt.Errorf("bench: raw baseline: dequeue: %w", err))
			}
			break
		}
		if len(resp.Messages) == 0 {
			// Everything left is in flight; look again shortly.
			select {
			case <-time.After(wait):
			case <-pctx.Done():
			}
			continue
		}
		inflight.Add(int64(len(resp.Messages)))
		for _, m := range resp.Messages {
			work <- m
		}
	}
	close(work)
	workers.Wait()
	elapsed := time.Since(began)
	if first != nil {
		return res, first
	}
	if done.Load() < int64(cfg.N) {
		return res, fmt.Errorf("bench: raw baseline: %d of %d processed within %s", done.Load(), cfg.N, cfg.Timeout)
	}
	res.processedPerS = float64(cfg.N) / elapsed.Seconds()
	return res, nil
}

// dropAzure deletes the queue and tables a run created under prefix, so a
// later phase (the baseline) starts on an emulator of the same size and an
// account is not left with bench data. Errors are ignored: missing
// resources are fine.
func dropAzure(ctx context.Context, conn string, prefixes ...string) {
	qsvc, err := azqueue.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return
	}
	tsvc, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return
	}
	for _, p := range prefixes {
		_, _ = qsvc.NewQueueClient(p+"-commands").Delete(ctx, nil)
		_, _ = tsvc.DeleteTable(ctx, p+"commands", nil)
		_, _ = tsvc.DeleteTable(ctx, p+"poison", nil)
	}
}
