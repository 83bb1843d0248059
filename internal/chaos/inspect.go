package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/enqueue"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/storage"
)

// The data layout the suite reads (docs/lifecycle.md). It is read raw,
// through the storage drivers, not through package status, so that a bug in
// the read model cannot hide a bug in what was written.
const (
	rowCommand        = "a:cmd"
	rowEventPrefix    = "e:"
	completedAtProp   = "CompletedAt" // on a started row: its attempt's completion, the next event, has no row
	unqueuedPartition = "~unqueued"
	commandsQueue     = "commands" // the demo handlers' logical queue
)

// event is one lifecycle event as stored.
type event struct {
	Seq     string // row key
	Kind    string
	Time    time.Time
	Attempt int
	Worker  string
	Step    int
	Note    string
	Error   string
	Reason  string
	RunAt   time.Time // created: the run-at time; failed: the next attempt's due time
}

func (e event) String() string {
	s := fmt.Sprintf("%s %s %s", e.Seq, e.Time.Format("15:04:05.000"), e.Kind)
	if e.Attempt != 0 {
		s += fmt.Sprintf(" attempt=%d", e.Attempt)
	}
	if e.Worker != "" {
		s += " worker=" + e.Worker
	}
	if e.Step != 0 {
		s += fmt.Sprintf(" step=%d", e.Step)
	}
	for _, kv := range [][2]string{{"reason", e.Reason}, {"error", e.Error}} {
		if kv[1] != "" {
			v := kv[1]
			if len(v) > 160 {
				v = v[:160] + "…"
			}
			s += " " + kv[0] + "=" + fmt.Sprintf("%q", v)
		}
	}
	return s
}

// history is one command as stored: its projection and its events.
type history struct {
	ID        string
	Found     bool
	Type      string
	Status    string
	Attempts  int
	Step      int
	LastError string
	// RunAt is the command row's run-at time (zero: none).
	RunAt  time.Time
	Events []event
	// OrderKey and OrderSeq are the command's order key and place (flow.go).
	OrderKey string
	OrderSeq int64
}

// outcome returns the event recording the outcome of the attempt
// (worker, attempt): completed, failed or poisoned (nil if none).
func (h *history) outcome(worker string, attempt int) *event {
	for i := range h.Events {
		e := &h.Events[i]
		if e.Worker == worker && e.Attempt == attempt && (e.Kind == "completed" || e.Kind == "failed" || e.Kind == "deferred" || e.Kind == "poisoned") {
			return e
		}
	}
	return nil
}

// has reports whether the history holds an event of kind by (worker, attempt).
func (h *history) has(kind, worker string, attempt int) bool {
	for _, e := range h.Events {
		if e.Kind == kind && e.Worker == worker && e.Attempt == attempt {
			return true
		}
	}
	return false
}

func (h *history) count(kind string) int {
	n := 0
	for _, e := range h.Events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func (h *history) String() string {
	if !h.Found {
		return "    (no command row)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "    projection: status=%s attempts=%d step=%d", h.Status, h.Attempts, h.Step)
	if h.LastError != "" {
		le := h.LastError
		if len(le) > 160 {
			le = le[:160] + "…"
		}
		fmt.Fprintf(&b, " lastError=%q", le)
	}
	for _, e := range h.Events {
		b.WriteString("\n    " + e.String())
	}
	return b.String()
}

// poisonEntry is one poison-table entity.
type poisonEntry struct {
	CommandID    string
	Type         string
	DequeueCount int64
	Reason       string
}

// snapshot is what storage holds at the end of a run.
type snapshot struct {
	cmds     map[string]*history
	poison   map[string]poisonEntry
	markers  map[string]bool
	messages map[string]int // command ID → queue messages seen (visible at the end)
	queueLen int            // approximate count of the queue
	other    int            // queue messages whose text names no command
}

func strProp(e storage.Entity, name string) string {
	s, _ := e.Properties[name].(string)
	return s
}

// nextEventKey returns the row key of the event after the one of row key k.
func nextEventKey(k string) string {
	n, err := strconv.ParseInt(strings.TrimPrefix(k, rowEventPrefix), 10, 64)
	if err != nil {
		return k + "+1"
	}
	return fmt.Sprintf("%s%010d", rowEventPrefix, n+1)
}

func intProp(e storage.Entity, name string) int64 {
	switch v := e.Properties[name].(type) {
	case int32:
		return int64(v)
	case int64:
		return v
	case float64:
		return int64(v)
	}
	return 0
}

func timeProp(e storage.Entity, name string) time.Time {
	t, _ := e.Properties[name].(time.Time)
	return t
}

// readHistory reads one command's partition.
func readHistory(ctx context.Context, t storage.Table, id string) (*history, error) {
	h := &history{ID: id}
	q := storage.Query{PartitionKey: id}
	for {
		page, err := t.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("read command %s: %w", id, err)
		}
		for _, e := range page.Entities {
			switch {
			case e.RowKey == rowCommand:
				h.Found = true
				h.Type, h.Status, h.LastError = strProp(e, "Type"), strProp(e, "Status"), strProp(e, "LastError")
				h.Attempts, h.Step = int(intProp(e, "Attempts")), int(intProp(e, "Step"))
				h.RunAt = timeProp(e, "RunAt")
				h.OrderKey, h.OrderSeq = strProp(e, "OrderKey"), intProp(e, "OrderSeq")
				// A command row may hold its created event (CreatedInRow:
				// number 1, at IssuedAt) and its last two events: a start and
				// its completion written together without an event row
				// (StartedAt, StartedSeq = EventSeq-1; docs/lifecycle.md).
				if created, _ := e.Properties["CreatedInRow"].(bool); created {
					h.Events = append(h.Events, event{Seq: fmt.Sprintf("%s%010d", rowEventPrefix, 1), Kind: "created", Time: timeProp(e, "IssuedAt")})
				}
				if seq, at := intProp(e, "StartedSeq"), timeProp(e, "StartedAt"); seq > 0 && !at.IsZero() &&
					seq == intProp(e, "EventSeq")-1 && h.Status == "completed" {
					key := fmt.Sprintf("%s%010d", rowEventPrefix, seq)
					w := strProp(e, "Worker")
					h.Events = append(h.Events,
						event{Seq: key, Kind: "started", Time: at, Attempt: h.Attempts, Worker: w},
						event{Seq: nextEventKey(key), Kind: "completed", Time: timeProp(e, "UpdatedAt"), Attempt: h.Attempts, Worker: w})
				}
			case strings.HasPrefix(e.RowKey, rowEventPrefix):
				ev := event{Seq: e.RowKey, Kind: strProp(e, "Kind"), Time: timeProp(e, "Time"),
					Attempt: int(intProp(e, "Attempt")), Worker: strProp(e, "Worker"), Step: int(intProp(e, "Step")),
					Note: strProp(e, "Note"), Error: strProp(e, "Error"), Reason: strProp(e, "Reason"), RunAt: timeProp(e, "RunAt")}
				h.Events = append(h.Events, ev)
				if done := timeProp(e, completedAtProp); !done.IsZero() && ev.Kind == "started" {
					h.Events = append(h.Events, event{Seq: nextEventKey(e.RowKey), Kind: "completed", Time: done, Attempt: ev.Attempt, Worker: ev.Worker})
				}
			}
		}
		if page.Continuation == "" {
			break
		}
		q.Continuation = page.Continuation
	}
	sort.Slice(h.Events, func(i, j int) bool { return h.Events[i].Seq < h.Events[j].Seq })
	return h, nil
}

// readSnapshot reads the histories of ids, the poison table, the reconciler
// markers and the messages left on the queue. The processes must be stopped:
// it dequeues the visible messages (with a long visibility) to see them all.
// A commands queue of several shards is read whole (every shard).
func readSnapshot(ctx context.Context, st storage.Store, prefix string, shards int, ids []string) (*snapshot, error) {
	cmds, err := st.Table(ctx, prefix+"commands")
	if err != nil {
		return nil, err
	}
	poison, err := st.Table(ctx, prefix+"poison")
	if err != nil {
		return nil, err
	}
	q, err := enqueue.OpenQueue(ctx, st, layout.Names{Prefix: prefix, Shards: map[string]int{commandsQueue: shards}}, commandsQueue)
	if err != nil {
		return nil, err
	}
	s := &snapshot{cmds: map[string]*history{}, poison: map[string]poisonEntry{}, markers: map[string]bool{}, messages: map[string]int{}}

	var mu sync.Mutex
	var firstErr error
	work := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				h, err := readHistory(ctx, cmds, id)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if h != nil {
					s.cmds[id] = h
				}
				mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}

	for pq := (storage.Query{}); ; {
		page, err := poison.Query(ctx, pq)
		if err != nil {
			return nil, fmt.Errorf("read poison table: %w", err)
		}
		for _, e := range page.Entities {
			id := strProp(e, "CommandID")
			if id == "" {
				id = e.PartitionKey
			}
			s.poison[id] = poisonEntry{CommandID: id, Type: strProp(e, "Type"), DequeueCount: intProp(e, "DequeueCount"), Reason: strProp(e, "Reason")}
		}
		if page.Continuation == "" {
			break
		}
		pq.Continuation = page.Continuation
	}
	// Over several accounts a marker is in any of them (the command's, or
	// another that answered): read each.
	markerTables := storage.ReplicasOf(cmds)
	if markerTables == nil {
		markerTables = []storage.Table{cmds}
	}
	for _, mt := range markerTables {
		for mq := (storage.Query{PartitionKey: unqueuedPartition}); ; {
			page, err := mt.Query(ctx, mq)
			if err != nil {
				return nil, fmt.Errorf("read reconciler markers: %w", err)
			}
			for _, e := range page.Entities {
				s.markers[e.RowKey] = true
			}
			if page.Continuation == "" {
				break
			}
			mq.Continuation = page.Continuation
		}
	}
	if s.queueLen, err = q.ApproximateCount(ctx); err != nil {
		return nil, fmt.Errorf("queue length: %w", err)
	}
	for {
		msgs, err := q.Dequeue(ctx, storage.MaxDequeue, time.Hour)
		if err != nil {
			return nil, fmt.Errorf("read queue: %w", err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			var env struct {
				ID string `json:"id"`
			}
			if json.Unmarshal([]byte(m.Text), &env) == nil && env.ID != "" {
				s.messages[env.ID]++
			} else {
				s.other++
			}
		}
	}
	return s, nil
}

// jline is one line of the demo handlers' journal (see cmd/cmdq's
// demojournal.go).
type jline struct {
	T       time.Time `json:"t"`
	PID     int       `json:"pid"`
	Worker  string    `json:"worker"`
	Ev      string    `json:"ev"`
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Attempt int       `json:"attempt"`
	Last    int       `json:"last"`
	Step    int       `json:"step"`
	Err     string    `json:"err"`
}

// execution is one run of a handler, from the journal.
type execution struct {
	ID, Type, Worker string
	PID, Attempt     int
	Last             int // run.LastStep() at the start
	Begin, End       int // line numbers; End -1 while no end line
	BeginT, EndT     time.Time
	Err              string
	Steps            []stepMark // step and stepped lines, in order
}

type stepMark struct {
	Line     int
	Step     int
	Recorded bool // "stepped": CompleteStep returned nil
}

func (x *execution) String() string {
	end := "no end line"
	if x.End >= 0 {
		end = "ended " + x.EndT.Format("15:04:05.000")
		if x.Err != "" {
			e := x.Err
			if len(e) > 100 {
				e = e[:100] + "…"
			}
			end += fmt.Sprintf(" with %q", e)
		} else {
			end += " ok"
		}
	}
	steps := ""
	for _, s := range x.Steps {
		if s.Recorded {
			steps += fmt.Sprintf(" ✓%d", s.Step)
		} else {
			steps += fmt.Sprintf(" %d", s.Step)
		}
	}
	if steps != "" {
		steps = "; steps" + steps
	}
	return fmt.Sprintf("execution by %s (pid %d) attempt %d, last step %d: began %s (journal line %d), %s%s",
		x.Worker, x.PID, x.Attempt, x.Last, x.BeginT.Format("15:04:05.000"), x.Begin, end, steps)
}

// journal is the parsed journal: executions per command, in begin order.
type journal struct {
	byID  map[string][]*execution
	lines int
	bad   int
}

func readJournal(path string) (*journal, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return &journal{byID: map[string][]*execution{}}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	j := &journal{byID: map[string][]*execution{}}
	open := map[string]*execution{} // pid/id/attempt → running execution
	key := func(l jline) string { return fmt.Sprintf("%d/%s/%d", l.PID, l.ID, l.Attempt) }
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		var l jline
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.ID == "" {
			j.bad++
			continue
		}
		switch l.Ev {
		case "begin":
			x := &execution{ID: l.ID, Type: l.Type, Worker: l.Worker, PID: l.PID, Attempt: l.Attempt, Last: l.Last, Begin: n, End: -1, BeginT: l.T}
			j.byID[l.ID] = append(j.byID[l.ID], x)
			open[key(l)] = x
		case "step", "stepped":
			if x := open[key(l)]; x != nil {
				x.Steps = append(x.Steps, stepMark{Line: n, Step: l.Step, Recorded: l.Ev == "stepped"})
			} else {
				j.bad++
			}
		case "end":
			if x := open[key(l)]; x != nil {
				x.End, x.EndT, x.Err = n, l.T, l.Err
				delete(open, key(l))
			} else {
				j.bad++
			}
		default:
			j.bad++
		}
	}
	j.lines = n
	return j, sc.Err()
}

// hasKind reports whether the history has an event of kind.
func (h *history) hasKind(kind string) bool {
	for _, e := range h.Events {
		if e.Kind == kind {
			return true
		}
	}
	return false
}
