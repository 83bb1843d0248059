package cmdq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/periodic"
	"github.com/cmdq-dev/cmdq/internal/engine/shared"
)

// PeriodicOption adjusts one periodic schedule (Periodic).
type PeriodicOption func(*periodicOptions)

type periodicOptions struct {
	catchUp int
}

// CatchUp sets how many ticks missed while no process ran the schedule a
// start issues: the latest n of them, from the schedule's first
// registration and at most two days back (the start of the day
// IssueWindowPastDays before today, UTC). 1 to MaxCatchUp (100), or
// NoCatchUp (-1) for none. Defaults to DefaultCatchUp (1): the latest
// missed tick only. Each tick the catch-up looks at costs what an issue
// costs (two calls on Azure: a batch and an enqueue for a missed tick, a
// failed batch and a point read for one that exists).
func CatchUp(n int) PeriodicOption { return func(o *periodicOptions) { o.catchUp = n } }

// schedule is one periodic schedule registered on the Client.
type schedule struct {
	name, spec  string
	sched       periodic.Schedule
	cmd         Command
	typ, queue  string
	catchUp     int
	since       time.Time // from the stored row (Start)
	sinceLoaded bool
}

// Periodic registers a periodic command: the Client issues cmd at every
// tick of spec while it processes (Start until Stop, Run, and RunFor
// during its time box). spec is a cron expression of five fields (minute
// hour day-of-month month day-of-week) or six (seconds first), in UTC
// unless it starts with CRON_TZ=Zone; a descriptor (@yearly, @monthly,
// @weekly, @daily, @hourly); or an interval, "@every D" (D at least 1 s,
// ticking at the multiples of D since the zero time, UTC: "@every 2s" at
// every even second, "@every 1h" on the hour). The cron syntax is
// robfig/cron/v3's.
//
// Every process that registers the same name may issue the tick, and
// exactly one command exists per tick however many do, with no leader: the
// tick's command ID derives from the name and the tick time (a day ID of
// the tick's day), so the issues collapse on the ID as a unique key's do
// (Result.Duplicate), whatever their parameters. Its correlation ID is
// "periodic:NAME@TICK" (TICK in RFC 3339, UTC). Ticks missed while no
// process ran the schedule are issued on start, up to CatchUp (default:
// the latest one only). Each process stores the schedule on start (its
// row in partition ~periodic: one point read, plus one write the first
// time or when it changed) so that ListPeriodic and GET /v1/periodic show
// it everywhere. A tick costs each process one issue: two storage calls
// on Azure (a batch and an enqueue for the first process, a failed batch
// and a point read for the others); nothing polls in between
// (docs/lifecycle.md, "Periodic commands").
//
// name follows the command type naming rule (1-128 characters: a letter,
// then letters, digits, '.', '_' or '-'). Register every schedule before
// Start (ErrStarted after). A malformed spec or name, a nil command, a
// bad option or a name registered twice fail with ErrInvalidSchedule.
func (c *Client) Periodic(name, spec string, cmd Command, opts ...PeriodicOption) error {
	if err := c.editable(); err != nil {
		return err
	}
	if err := model.ValidateType(name); err != nil {
		return fmt.Errorf("%w: name %q: a schedule name is 1-%d characters: a letter, then letters, digits, '.', '_' or '-' (such as \"reports.nightly\")", ErrInvalidSchedule, name, model.MaxPeriodicNameLength)
	}
	sched, err := periodic.Parse(spec)
	if err != nil {
		return fmt.Errorf("periodic %s: %w", name, err)
	}
	if cmd == nil {
		return fmt.Errorf("%w: periodic %s has a nil command", ErrInvalidSchedule, name)
	}
	typ := cmd.CommandType()
	if err := model.ValidateType(typ); err != nil {
		return fmt.Errorf("%w: periodic %s: %w", ErrInvalidSchedule, name, err)
	}
	o := periodicOptions{catchUp: model.DefaultCatchUp}
	for _, f := range opts {
		f(&o)
	}
	if o.catchUp != model.NoCatchUp && (o.catchUp < 1 || o.catchUp > model.MaxCatchUp) {
		return fmt.Errorf("%w: periodic %s: CatchUp(%d); give 1 to %d, or NoCatchUp", ErrInvalidSchedule, name, o.catchUp, model.MaxCatchUp)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.ContainsFunc(c.schedules, func(s *schedule) bool { return s.name == name }) {
		return fmt.Errorf("%w: periodic %s is already registered", ErrInvalidSchedule, name)
	}
	c.schedules = append(c.schedules, &schedule{name: name, spec: spec, sched: sched, cmd: cmd, typ: typ,
		queue: c.queueOf(cmd), catchUp: max(o.catchUp, 0)})
	return nil
}

// queueOf returns the logical queue a command is issued to: its type's
// registered or declared queue, else the one its Go type declares, else
// DefaultQueue.
func (c *Client) queueOf(cmd Command) string {
	if q, ok := c.reg.QueueOf(cmd.CommandType()); ok && q != "" {
		return q
	}
	return cmp.Or(issuer.Declared(cmd, declared).Queue, model.DefaultQueue)
}

// worker is the name of this process in stored rows: Config.Worker, else
// "<hostname>-<pid>".
func (c *Client) worker() string {
	if c.cfg.Worker != "" {
		return c.cfg.Worker
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "worker"
	}
	return h + "-" + strconv.Itoa(os.Getpid())
}

// schedulerRun is a running periodic scheduler (Start, RunFor).
type schedulerRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the scheduler and waits for it and its issues in flight
// (within Config.DrainTimeout; not tried again if they fail).
func (s *schedulerRun) stop() {
	if s != nil {
		s.cancel()
		<-s.done
	}
}

// prepareSchedules stores every registered schedule's row (docs: one
// point read each, plus a write the first time or after a change) and
// returns the scheduler's entries (nil without schedules).
func (c *Client) prepareSchedules(ctx context.Context) ([]periodic.Entry, error) {
	c.mu.Lock()
	scheds := slices.Clone(c.schedules)
	c.mu.Unlock()
	if len(scheds) == 0 {
		return nil, nil
	}
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	by := c.worker()
	entries := make([]periodic.Entry, 0, len(scheds))
	for _, s := range scheds {
		params, err := issuer.Params(s.cmd)
		if err != nil {
			return nil, fmt.Errorf("periodic %s: %w", s.name, err)
		}
		row, err := r.StoreSchedule(ctx, shared.Schedule{Name: s.name, Spec: s.spec, Type: s.typ, Queue: s.queue, CatchUp: s.catchUp, Params: params}, by)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		s.since, s.sinceLoaded = row.Since, true
		c.mu.Unlock()
		entries = append(entries, periodic.Entry{Name: s.name, Schedule: s.sched, CatchUp: s.catchUp, Since: row.Since,
			Issue: func(ctx context.Context, id string, tick time.Time) error {
				_, err := c.issuer().IssueDerived(ctx, s.cmd, id, tickCorrelation(s.name, tick))
				return err
			}})
	}
	return entries, nil
}

// tickCorrelation is a tick command's correlation ID.
func tickCorrelation(name string, tick time.Time) string {
	return "periodic:" + name + "@" + tick.UTC().Format(time.RFC3339Nano)
}

// catchUp issues the missed ticks of entries (one try each, all at once)
// and returns the time it looked up to and the ticks that failed, for
// runScheduler.
func (c *Client) catchUp(ctx context.Context, entries []periodic.Entry) (caughtUp, error) {
	if len(entries) == 0 {
		return caughtUp{}, nil
	}
	start := c.now()
	failed := periodic.CatchUp(ctx, entries, start, c.periodicOptions())
	return caughtUp{entries: entries, start: start, failed: failed}, nil
}

// caughtUp is what catchUp did: the scheduler goes on from it.
type caughtUp struct {
	entries []periodic.Entry
	start   time.Time
	failed  []periodic.Tick
}

func (c *Client) periodicOptions() periodic.Options {
	drain := c.cfg.DrainTimeout
	if drain <= 0 {
		drain = model.DefaultDrainTimeout
	}
	return periodic.Options{Logger: c.cfg.Logger, Now: c.now, Clock: engineClockOf(c.cfg.Clock), Drain: drain}
}

// runScheduler runs the scheduler from cu in the background until ctx
// ends or the returned run is stopped (nil without schedules).
func (c *Client) runScheduler(ctx context.Context, cu caughtUp) *schedulerRun {
	if len(cu.entries) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	run := &schedulerRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		periodic.Run(ctx, cu.entries, cu.start, cu.failed, c.periodicOptions())
		c.mu.Lock()
		if c.scheduler == run { // Start's context ended: Start may be called again
			c.scheduler = nil
		}
		c.mu.Unlock()
	}()
	return run
}

// ListPeriodic returns every periodic schedule, sorted by name: those
// stored by any process on the store (their rows in partition ~periodic)
// and those registered on this Client (Local), each with its latest tick
// at or before now since the schedule was first stored (its command's
// state, or Missed) and its next tick. Cost: one query of the schedules'
// rows and one point read per schedule with a latest tick (none for a
// tick command read final before: Config.FinalCache).
func (c *Client) ListPeriodic(ctx context.Context) ([]PeriodicInfo, error) {
	byName, err := c.periodicInfos(ctx)
	if err != nil {
		return nil, err
	}
	var last []*TickInfo
	now := c.now().UTC()
	for _, info := range byName {
		for _, t := range c.ticksOf(info, 1, now) {
			info.LastTick = &TickInfo{At: t, ID: layout.TickID(info.Name, t)}
			last = append(last, info.LastTick)
		}
	}
	if err := c.readTicks(ctx, last); err != nil {
		return nil, fmt.Errorf("cmdq: list periodic schedules: %w", err)
	}
	out := make([]PeriodicInfo, 0, len(byName))
	for _, info := range byName {
		out = append(out, *info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// MaxRecentTicks is the most ticks GetPeriodic reads (20).
const MaxRecentTicks = 20

// GetPeriodic returns periodic schedule name as ListPeriodic lists it,
// with its latest ticks (up to ticks of them, at most MaxRecentTicks, the
// ticks of its spec at or before now since Since, newest first) in
// RecentTicks, each with its command's state or Missed; LastTick is the
// first of them. Triggered ticks (TriggerPeriodic) are not among them:
// their times are not the spec's. ErrNotFound when neither the store nor
// this Client knows the schedule. Cost: one query of the schedules' rows
// and one point read per tick (none for a tick command read final
// before: Config.FinalCache).
func (c *Client) GetPeriodic(ctx context.Context, name string, ticks int) (PeriodicInfo, error) {
	if ticks < 0 || ticks > MaxRecentTicks {
		return PeriodicInfo{}, fmt.Errorf("%w: %d recent ticks; give 0 to %d", ErrInvalidSchedule, ticks, MaxRecentTicks)
	}
	byName, err := c.periodicInfos(ctx)
	if err != nil {
		return PeriodicInfo{}, err
	}
	info, ok := byName[name]
	if !ok {
		return PeriodicInfo{}, fmt.Errorf("%w: no periodic schedule %s is registered here or stored (GET /v1/periodic lists them)", ErrNotFound, name)
	}
	ts := c.ticksOf(info, max(ticks, 1), c.now().UTC())
	if len(ts) == 0 {
		return *info, nil
	}
	info.RecentTicks = make([]TickInfo, len(ts))
	recent := make([]*TickInfo, len(ts))
	for i, t := range ts {
		info.RecentTicks[len(ts)-1-i] = TickInfo{At: t, ID: layout.TickID(name, t)}
		recent[len(ts)-1-i] = &info.RecentTicks[len(ts)-1-i]
	}
	if err := c.readTicks(ctx, recent); err != nil {
		return PeriodicInfo{}, fmt.Errorf("cmdq: periodic schedule %s: %w", name, err)
	}
	last := info.RecentTicks[0]
	info.LastTick = &last
	if ticks == 0 {
		info.RecentTicks = nil
	}
	return *info, nil
}

// ticksOf returns up to n of info's latest ticks at or before now since
// its Since (at most CatchUpHorizonDays back when Since is unknown),
// oldest first; none for a spec that does not parse (info.Error says
// why), and sets info.NextTick.
func (c *Client) ticksOf(info *PeriodicInfo, n int, now time.Time) []time.Time {
	sched, err := periodic.Parse(info.Spec)
	if err != nil {
		info.Error = err.Error()
		return nil
	}
	info.NextTick = sched.Next(now)
	after := info.Since
	if after.IsZero() {
		after = now.Add(-model.CatchUpHorizonDays * 24 * time.Hour)
	}
	return periodic.Last(sched, n, after, now)
}

// readTicks fills each tick's State (or Missed) from its command, the
// reads side by side: one point read each (none for a command read final
// before).
func (c *Client) readTicks(ctx context.Context, ticks []*TickInfo) error {
	errs := make([]error, len(ticks))
	var wg sync.WaitGroup
	for i, t := range ticks {
		wg.Go(func() { errs[i] = c.readTick(ctx, t) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readTick fills tick's State (or Missed) from its command.
func (c *Client) readTick(ctx context.Context, tick *TickInfo) error {
	st, err := c.Get(ctx, tick.ID)
	switch {
	case err == nil:
		tick.State = st.State
	case errors.Is(err, ErrNotFound):
		tick.Missed = true
	default:
		return err
	}
	return nil
}

// periodicInfos returns every schedule the store or this Client knows, by
// name, without ticks: one query of the schedules' rows.
func (c *Client) periodicInfos(ctx context.Context) (map[string]*PeriodicInfo, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := r.ReadSchedules(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*PeriodicInfo{}
	for _, row := range rows {
		byName[row.Name] = &PeriodicInfo{Name: row.Name, Spec: row.Spec, Type: row.Type, Queue: row.Queue, CatchUp: row.CatchUp,
			Since: row.Since, UpdatedAt: row.UpdatedAt, UpdatedBy: row.UpdatedBy, CanTrigger: row.Params != nil}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.schedules {
		info, ok := byName[s.name]
		if !ok || info.Spec != s.spec {
			// Not stored yet (before Start), or stored by another
			// version: this process's is what it runs.
			info = &PeriodicInfo{Name: s.name, Spec: s.spec, Type: s.typ, Queue: s.queue, CatchUp: s.catchUp}
			if s.sinceLoaded {
				info.Since = s.since
			}
			if ok {
				info.Since, info.UpdatedAt, info.UpdatedBy = byName[s.name].Since, byName[s.name].UpdatedAt, byName[s.name].UpdatedBy
			}
			byName[s.name] = info
		}
		info.Local, info.CanTrigger = true, true
	}
	return byName, nil
}

// PeriodicNames returns the names of the periodic schedules registered on
// the Client (Periodic), sorted.
func (c *Client) PeriodicNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.schedules))
	for _, s := range c.schedules {
		out = append(out, s.name)
	}
	sort.Strings(out)
	return out
}

// Periodic commands (docs/lifecycle.md, "Periodic commands").

// PeriodicInfo is one periodic schedule as an operator sees it
// (Client.ListPeriodic, GET /v1/periodic).
type PeriodicInfo struct {
	// Name names the schedule; a tick's command ID derives from it and the
	// tick time.
	Name string `json:"name"`
	// Spec is the schedule: a cron expression (five fields, or six with
	// seconds first), a descriptor (@hourly, @daily, …) or an interval
	// (@every 2s).
	Spec string `json:"spec"`
	// Type is the command type issued at each tick.
	Type string `json:"type"`
	// Queue is the logical queue of the tick's commands.
	Queue string `json:"queue"`
	// CatchUp is how many of the latest ticks missed while no process ran
	// the schedule a starting process issues (0: none).
	CatchUp int `json:"catchUp"`
	// Since is when the schedule was first registered on the store (UTC):
	// no tick before it is ever issued.
	Since time.Time `json:"since"`
	// UpdatedBy names the process (Config.Worker) that last stored the
	// schedule, and UpdatedAt when (UTC). Every process that runs the
	// schedule stores it on start.
	UpdatedBy string    `json:"updatedBy,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
	// Local is true when this process registered the schedule
	// (Client.Periodic); false for one only stored by another process.
	Local bool `json:"local"`
	// CanTrigger is true when TriggerPeriodic can issue the schedule's
	// command here: this process runs it, or its stored row holds the
	// command's parameters (rows stored by versions before them do not:
	// restart a process that runs it once).
	CanTrigger bool `json:"canTrigger"`
	// LastTick is the latest tick at or before now since Since, with its
	// command; nil when there was none yet.
	LastTick *TickInfo `json:"lastTick,omitempty"`
	// RecentTicks are the latest ticks, newest first, each with its
	// command (GetPeriodic only; empty in ListPeriodic).
	RecentTicks []TickInfo `json:"recentTicks,omitempty"`
	// NextTick is the next tick after now (UTC); zero when the spec never
	// fires again.
	NextTick time.Time `json:"nextTick,omitzero"`
	// Error says why the stored spec could not be read (a spec this
	// version cannot parse); "" otherwise.
	Error string `json:"error,omitempty"`
}

// TickInfo is one tick of a periodic schedule.
type TickInfo struct {
	// At is the tick's scheduled time (UTC).
	At time.Time `json:"at"`
	// ID is the tick's command ID (derived from the schedule's name and
	// At).
	ID string `json:"id"`
	// State is the tick command's state; "" when no command exists for
	// the tick (Missed).
	State State `json:"state,omitempty"`
	// Missed is true when no command exists for the tick: every process
	// running the schedule was down at its time (a later start may still
	// catch it up), or it is being issued right now.
	Missed bool `json:"missed,omitempty"`
	// Duplicate is true, from TriggerPeriodic, when the tick's command
	// existed already (the same trigger time again): nothing new was
	// issued.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Limits and defaults of periodic schedules.
const (
	// MaxPeriodicNameLength is the longest schedule name (128).
	MaxPeriodicNameLength = model.MaxPeriodicNameLength
	// MaxCatchUp is the largest catch-up limit (100 ticks).
	MaxCatchUp = model.MaxCatchUp
	// DefaultCatchUp is the default catch-up limit: the latest missed
	// tick only.
	DefaultCatchUp = model.DefaultCatchUp
	// NoCatchUp as a catch-up limit issues no missed tick on start.
	NoCatchUp = model.NoCatchUp
	// CatchUpHorizonDays is how far back a start looks for missed ticks:
	// to the start (00:00 UTC) of the day IssueWindowPastDays (2) before
	// today. An older tick's command may have been removed by retention
	// and could not be told from a missed one.
	CatchUpHorizonDays = model.CatchUpHorizonDays
)
