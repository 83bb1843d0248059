package cmdq

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/cmdqtype"
)

// Processors lists every processor on the store (every process and
// machine with the same prefix) from their heartbeat rows
// (Config.HeartbeatInterval): name, host, process ID, state, messages in
// flight, queues, when its run started and when it was last seen. A
// processor whose row was not rewritten for cmdqtype.ProcessorGoneAfter
// of its intervals is Gone (killed, crashed or cut off from storage: its
// State then says "gone"); rows older than cmdqtype.ProcessorForgetAfter
// are left out (processors delete them). The Client's own processor, when
// running, is Local, with its state and in-flight count as of now. Sorted:
// running ones first, then by host and name. Cost: one query (one request
// per 1000 processors).
func (c *Client) Processors(ctx context.Context) ([]ProcessorInfo, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	beats, err := r.ReadBeats(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	local := ""
	var live Health
	if p := c.procLive.Load(); p != nil && c.Stats().Running {
		local, live = p.InstanceID(), p.Health()
	}
	out := make([]ProcessorInfo, 0, len(beats))
	for _, b := range beats {
		every := b.Every
		if every <= 0 {
			every = cmdqtype.DefaultHeartbeatInterval
		}
		age := now.Sub(b.Seen)
		if age > cmdqtype.ProcessorForgetAfter {
			continue
		}
		info := ProcessorInfo{ID: b.ID, Name: b.Name, Host: b.Host, PID: b.PID, State: b.State, InFlight: b.InFlight,
			Concurrency: b.Concurrency, Queues: b.Queues, Started: b.Started, LastSeen: b.Seen, IntervalMS: every.Milliseconds()}
		if info.Queues == nil {
			info.Queues = []string{}
		}
		info.Totals = cmdqtype.OutcomeCounts{Completed: b.Completed, Failed: b.Failed, Poisoned: b.Poisoned}
		info.Recent = cmdqtype.OutcomeCounts{Completed: b.RecentCompleted, Failed: b.RecentFailed, Poisoned: b.RecentPoisoned}
		if f := b.LastFailure; f.CommandID != "" {
			info.LastFailure = &cmdqtype.Failure{CommandID: f.CommandID, Type: f.Type, Error: f.Error, Poisoned: f.Poisoned, At: f.At}
		}
		switch {
		case b.ID == local:
			info.Local, info.State, info.InFlight = true, string(live.State), live.InFlight
		case age > time.Duration(cmdqtype.ProcessorGoneAfter)*every:
			info.Gone, info.State = true, "gone"
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b ProcessorInfo) int {
		if a.Gone != b.Gone {
			if a.Gone {
				return 1
			}
			return -1
		}
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}
