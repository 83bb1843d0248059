package embedded_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/storage"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// envShift is the child's clock offset (a duration) in the completion
// crash test: each round's child sees the messages a killed one left
// leased.
const envShift = "CMDQ_EMBEDDED_SHIFT"

// groupRows is the number of commands of TestCrashDuringGroupedCompletion.
const groupRows = 400

// completeChild is the child process of TestCrashDuringGroupedCompletion:
// 12 goroutines dequeue messages and complete them in groups, each a
// BatchDeleteMany of the command row's update (conditional on its ETag),
// an event row inserted under that ETag, and the message's delete; after
// each group returns, its commands are printed as ACK lines. It runs until
// killed.
func completeChild(s *embedded.Store) {
	ctx := context.Background()
	tb, err := s.Table(ctx, "groups")
	if err != nil {
		os.Exit(3)
	}
	q, err := s.Queue(ctx, "groups")
	if err != nil {
		os.Exit(5)
	}
	var mu sync.Mutex
	for range 12 {
		go func() {
			for {
				ms, err := q.Dequeue(ctx, 1+int(time.Now().UnixNano()%8), time.Hour)
				if err != nil || len(ms) == 0 {
					continue
				}
				var items []storage.DeleteItem
				for _, m := range ms {
					e, err := tb.Get(ctx, m.Text, "a:cmd")
					if err != nil {
						os.Exit(6)
					}
					items = append(items, storage.DeleteItem{Table: "groups", PartitionKey: m.Text, Queue: "groups", ID: m.ID, PopReceipt: m.PopReceipt,
						Ops: []storage.BatchOp{
							{Kind: storage.OpInsert, AssumeAbsent: true, Entity: storage.Entity{PartitionKey: m.Text, RowKey: "e:2", Properties: map[string]any{"Kind": "completed"}}},
							{Kind: storage.OpUpdate, Mode: storage.Merge, IfMatch: e.ETag, Entity: storage.Entity{PartitionKey: m.Text, RowKey: "a:cmd", Properties: map[string]any{"Status": "completed"}}},
						}})
				}
				res, err := s.BatchDeleteMany(ctx, items)
				if err != nil {
					os.Exit(7)
				}
				mu.Lock()
				for i, r := range res {
					if r.Err != nil || r.DeleteErr != nil {
						fmt.Fprintln(os.Stdout, "ERR", items[i].PartitionKey, r.Err, r.DeleteErr)
						os.Exit(8)
					}
					fmt.Fprintln(os.Stdout, "ACK", items[i].PartitionKey)
				}
				mu.Unlock()
			}
		}()
	}
	select {}
}

// TestCrashDuringGroupedCompletion kills (SIGKILL) a process that writes
// grouped completions — command row update, event row and message delete
// in one BatchDeleteMany — at a different moment in each of several
// rounds, and checks after every reopen that each command is either
// completed with its event row and its message gone, or untouched with its
// message still there: never one without the other, and every completion
// acknowledged before the kill is there.
func TestCrashDuringGroupedCompletion(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "groups")
	s, err := embedded.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	tb, err := s.Table(ctx, "groups")
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue(ctx, "groups")
	if err != nil {
		t.Fatal(err)
	}
	for i := range groupRows {
		pk := "c" + strconv.Itoa(i)
		if _, err := tb.Insert(ctx, storage.Entity{PartitionKey: pk, RowKey: "a:cmd", Properties: map[string]any{"Status": "pending", "Params": strings.Repeat("p", i%300)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, pk, 0, storage.NoExpiry); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	done := 0
	for round := 1; done < groupRows; round++ {
		if round > 40 {
			t.Fatalf("%d of %d completed after 40 rounds", done, groupRows)
		}
		shift := time.Duration(round) * 2 * time.Hour
		cmd, sc := child(t, "complete", path, envShift+"="+shift.String())
		// Kill after a different number of acknowledgements each round
		// (the groups in flight then are cut anywhere).
		want := min(7+(round*37)%90, groupRows-done)
		got := 0
		for got < want && sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "ERR") {
				t.Fatalf("child: %s", line)
			}
			if pk, ok := strings.CutPrefix(line, "ACK "); ok {
				acked[pk] = true
				got++
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		for sc.Scan() { // acknowledgements printed before the kill
			if pk, ok := strings.CutPrefix(sc.Text(), "ACK "); ok {
				acked[pk] = true
			}
		}
		// Reopen with the clock past every lease, and check.
		later := time.Now().Add(shift + time.Hour + time.Minute)
		s, err := embedded.Open(path, &embedded.Options{Now: func() time.Time { return later }, PurgeInterval: -1})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		tb, err := s.Table(ctx, "groups")
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Queue(ctx, "groups")
		if err != nil {
			t.Fatal(err)
		}
		queued := map[string]int{}
		for {
			ms, err := q.Dequeue(ctx, 32, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) == 0 {
				break
			}
			for _, m := range ms {
				queued[m.Text]++
			}
		}
		done = 0
		for i := range groupRows {
			pk := "c" + strconv.Itoa(i)
			e, err := tb.Get(ctx, pk, "a:cmd")
			if err != nil {
				t.Fatalf("round %d: %s: %v", round, pk, err)
			}
			_, evErr := tb.Get(ctx, pk, "e:2")
			completed := e.Properties["Status"] == "completed"
			switch {
			case queued[pk] > 1:
				t.Fatalf("round %d: %s has %d messages", round, pk, queued[pk])
			case completed && (evErr != nil || queued[pk] != 0):
				t.Fatalf("round %d: %s completed, but event row: %v, messages left: %d", round, pk, evErr, queued[pk])
			case !completed && (evErr == nil || queued[pk] != 1):
				t.Fatalf("round %d: %s not completed, but event row written (%v) or messages %d (want 1)", round, pk, evErr == nil, queued[pk])
			case acked[pk] && !completed:
				t.Fatalf("round %d: %s was acknowledged before the kill and is not completed", round, pk)
			}
			if completed {
				done++
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %d acknowledgements; %d of %d completed", round, got, done, groupRows)
	}
}
