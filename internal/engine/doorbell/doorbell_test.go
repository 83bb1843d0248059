package doorbell

import (
	"container/list"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var testKey = Key([]byte("account key"), "cmdq")

// clock is a settable clock for the tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// listen starts a Bell on loopback whose wakes go to the returned channel.
func listen(t *testing.T, key []byte, opts BellOptions) (*Bell, chan Wake) {
	t.Helper()
	got := make(chan Wake, 1000)
	b, err := Listen("127.0.0.1:0", key, func(w Wake) { got <- w }, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, got
}

// ringer returns a Ringer whose peers are peers, and counts its reads.
func ringer(t *testing.T, key []byte, opts RingerOptions, peers ...Peer) (*Ringer, *atomic.Int32) {
	t.Helper()
	return ringerAt(t, key, opts, time.Now, peers...)
}

// ringerAt is ringer with a clock.
func ringerAt(t *testing.T, key []byte, opts RingerOptions, now func() time.Time, peers ...Peer) (*Ringer, *atomic.Int32) {
	t.Helper()
	var reads atomic.Int32
	r, err := newRingerWith(key, func(context.Context) ([]Peer, error) {
		reads.Add(1)
		return peers, nil
	}, opts, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, &reads
}

func next(t *testing.T, got chan Wake) Wake {
	t.Helper()
	select {
	case w := <-got:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no wake arrived in 10 s")
		return Wake{}
	}
}

// until waits for cond, checking it every millisecond, for at most 10 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWakeArrivesAndIsAcked(t *testing.T) {
	b, got := listen(t, testKey, BellOptions{})
	addr := b.Addr().String()
	r, _ := ringer(t, testKey, RingerOptions{}, Peer{Addr: addr, Queues: []string{"commands", "jobs"}})
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	r.Ring(context.Background(), "jobs", Wake{Name: "cmdq-jobs-s2", At: at})
	w := next(t, got)
	if w.Name != "cmdq-jobs-s2" || !w.At.Equal(at) {
		t.Fatalf("got %+v, want cmdq-jobs-s2 due %s", w, at)
	}
	until(t, "the ack", func() bool { s, _ := r.Status(addr); return !s.LastAck.IsZero() })
	if s, ok := r.Status(addr); !ok || s.Unreachable || s.LastRing.IsZero() {
		t.Fatalf("status %+v (known %v), want rung, acked and reachable", s, ok)
	}
	if c := b.Counts(); c[Accepted] != 1 {
		t.Fatalf("counts %v, want 1 accepted", c)
	}
}

func TestOnlyThePeersOfTheQueueAreRung(t *testing.T) {
	jobs, gotJobs := listen(t, testKey, BellOptions{})
	other, gotOther := listen(t, testKey, BellOptions{})
	self, gotSelf := listen(t, testKey, BellOptions{})
	r, reads := ringer(t, testKey, RingerOptions{Self: self.Addr().String()},
		Peer{Addr: jobs.Addr().String(), Queues: []string{"jobs"}},
		Peer{Addr: other.Addr().String(), Queues: []string{"commands"}},
		Peer{Addr: self.Addr().String(), Queues: []string{"jobs"}},
		Peer{Queues: []string{"jobs"}}) // no bell
	r.Ring(context.Background(), "jobs", Wake{Name: "jobs"})
	if w := next(t, gotJobs); w.Name != "jobs" {
		t.Fatalf("got %+v", w)
	}
	// The other two got nothing: a wake sent to them would have arrived
	// before the one rung after it, to the same bell, over loopback.
	r.Ring(context.Background(), "commands", Wake{Name: "commands"})
	if w := next(t, gotOther); w.Name != "commands" {
		t.Fatalf("the commands peer got %+v first, want the commands wake", w)
	}
	select {
	case w := <-gotSelf:
		t.Fatalf("the ringer's own bell was rung: %+v", w)
	default:
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("the peer list was read %d times for two rings within Refresh, want 1", n)
	}
}

func TestPeerListReadAgainWhenStale(t *testing.T) {
	b, got := listen(t, testKey, BellOptions{})
	c := &clock{t: time.Now()}
	r, reads := ringerAt(t, testKey, RingerOptions{}, c.now, Peer{Addr: b.Addr().String(), Queues: []string{"q"}})
	r.Ring(context.Background(), "q", Wake{Name: "q"})
	next(t, got)
	c.add(DefaultRefresh + time.Second)
	r.Ring(context.Background(), "q", Wake{Name: "q2"})
	next(t, got) // rung with the list it had
	until(t, "the background read", func() bool { return reads.Load() == 2 })
}

func TestForgedAndOtherDeploymentsDropped(t *testing.T) {
	b, got := listen(t, testKey, BellOptions{})
	addr := b.Addr().String()
	stranger, _ := ringer(t, Key([]byte("another account"), "cmdq"), RingerOptions{}, Peer{Addr: addr, Queues: []string{"q"}})
	otherPrefix, _ := ringer(t, Key([]byte("account key"), "other"), RingerOptions{}, Peer{Addr: addr, Queues: []string{"q"}})
	stranger.Ring(context.Background(), "q", Wake{Name: "q"})
	otherPrefix.Ring(context.Background(), "q", Wake{Name: "q"})
	conn, err := net.DialUDP("udp", nil, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, junk := range [][]byte{[]byte("hello"), make([]byte, 200), []byte("CQDB\x01")} {
		if _, err := conn.Write(junk); err != nil {
			t.Fatal(err)
		}
	}
	until(t, "five forged", func() bool { return b.Counts()[Forged] == 5 })
	select {
	case w := <-got:
		t.Fatalf("a forged wake was handled: %+v", w)
	default:
	}
	if s, _ := stranger.Status(addr); !s.LastAck.IsZero() {
		t.Fatal("a forged wake was acked")
	}
}

func TestReplayedAndStaleDropped(t *testing.T) {
	c := &clock{t: time.Now()}
	got := make(chan Wake, 10)
	b, err := listenWith("127.0.0.1:0", testKey, func(w Wake) { got <- w }, BellOptions{}, c.now)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conn, err := net.DialUDP("udp", nil, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := sealer{key: testKey}
	send := func(h header, sent time.Time) {
		d, err := s.encodeWake(h, sent, Wake{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	send(header{sender: 1, counter: 5}, c.now())
	next(t, got)
	send(header{sender: 1, counter: 5}, c.now()) // the same datagram again
	send(header{sender: 1, counter: 4}, c.now()) // an older one
	send(header{sender: 2, counter: 1}, c.now().Add(-DefaultWindow-time.Minute))
	send(header{sender: 3, counter: 1}, c.now().Add(DefaultWindow+time.Minute))
	send(header{sender: 1, counter: 6}, c.now()) // the sender's next
	if w := next(t, got); w.Name != "q" {
		t.Fatalf("got %+v", w)
	}
	until(t, "the counts", func() bool {
		n := b.Counts()
		return n[Accepted] == 2 && n[Replayed] == 2 && n[Stale] == 2
	})
}

func TestSendersForgottenLeastRecentFirst(t *testing.T) {
	b := &Bell{opts: BellOptions{Senders: 2}, seen: map[uint64]*list.Element{}, order: list.New()}
	for _, step := range []struct {
		sender, counter uint64
		fresh           bool
	}{
		{1, 1, true}, {2, 1, true}, {1, 2, true}, // 1 heard of last
		{3, 1, true},  // forgets 2, the least recent
		{1, 2, false}, // 1 is remembered
		{2, 1, true},  // 2 was forgotten: its old counter is new again
		{3, 1, false},
	} {
		if got := b.fresh(header{sender: step.sender, counter: step.counter}); got != step.fresh {
			t.Fatalf("sender %d counter %d: fresh %v, want %v", step.sender, step.counter, got, step.fresh)
		}
	}
}

func TestRateLimited(t *testing.T) {
	c := &clock{t: time.Now()}
	// A frozen clock: the bucket (1 token) never refills.
	b, err := listenWith("127.0.0.1:0", testKey, func(Wake) {}, BellOptions{MaxRate: 10}, c.now)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conn, err := net.DialUDP("udp", nil, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := sealer{key: testKey}
	for i := range 20 {
		d, _ := s.encodeWake(header{sender: 9, counter: uint64(i + 1)}, c.now(), Wake{Name: "q"})
		if _, err := conn.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	until(t, "every datagram read", func() bool { n := b.Counts(); return n[Accepted]+n[Limited] == 20 })
	if n := b.Counts(); n[Accepted] != 1 || n[Limited] != 19 {
		t.Fatalf("counts %v, want 1 accepted and 19 limited", n)
	}
}

func TestThrottleCoalesces(t *testing.T) {
	b, got := listen(t, testKey, BellOptions{})
	r, _ := ringer(t, testKey, RingerOptions{Throttle: time.Hour}, Peer{Addr: b.Addr().String(), Queues: []string{"q"}})
	for range 50 {
		r.Ring(context.Background(), "q", Wake{Name: "q"})
	}
	next(t, got)
	if n := r.counter.Load(); n != 1 {
		t.Fatalf("50 rings within the throttle sent %d wakes, want 1 (the rest wait for its end)", n)
	}
	// Another name is throttled on its own.
	r.Ring(context.Background(), "q", Wake{Name: "cmdq-q-s1"})
	if w := next(t, got); w.Name != "cmdq-q-s1" {
		t.Fatalf("got %+v", w)
	}
}

func TestThrottledWakeSentAtItsEnd(t *testing.T) {
	b, got := listen(t, testKey, BellOptions{})
	r, _ := ringer(t, testKey, RingerOptions{Throttle: 50 * time.Millisecond}, Peer{Addr: b.Addr().String(), Queues: []string{"q"}})
	r.Ring(context.Background(), "q", Wake{Name: "q"})
	r.Ring(context.Background(), "q", Wake{Name: "q"})
	next(t, got)
	next(t, got) // the trailing one
}

func TestUnreachablePeer(t *testing.T) {
	// An address nobody listens on: a socket bound, then closed.
	dead, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	_ = dead.Close()
	live, got := listen(t, testKey, BellOptions{})
	c := &clock{t: time.Now()}
	r, _ := ringerAt(t, testKey, RingerOptions{}, c.now, Peer{Addr: deadAddr, Queues: []string{"q"}}, Peer{Addr: live.Addr().String(), Queues: []string{"q"}})
	r.RingAll(context.Background(), "q", Wake{Name: "a"})
	r.RingAll(context.Background(), "q", Wake{Name: "b"})
	next(t, got)
	next(t, got)
	until(t, "the live peer's acks", func() bool { s, _ := r.Status(live.Addr().String()); return !s.LastAck.IsZero() })
	c.add(2 * DefaultAckTimeout)
	if s, _ := r.Status(deadAddr); !s.Unreachable {
		t.Fatalf("the dead peer: %+v, want unreachable", s)
	}
	if s, _ := r.Status(live.Addr().String()); s.Unreachable {
		t.Fatalf("the live peer: %+v, want reachable", s)
	}
	if st := r.Statuses(); len(st) != 2 {
		t.Fatalf("statuses %+v, want both peers", st)
	}
}

func TestFirstRingWaitsForThePeerList(t *testing.T) {
	b, got := listen(t, testKey, BellOptions{})
	release := make(chan struct{})
	r, err := NewRinger(testKey, func(ctx context.Context) ([]Peer, error) {
		<-release
		return []Peer{{Addr: b.Addr().String(), Queues: []string{"q"}}}, nil
	}, RingerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan struct{})
	go func() {
		r.Ring(context.Background(), "q", Wake{Name: "q"})
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("the first ring returned before the peer list was read")
	case <-got:
		t.Fatal("a wake was sent before the peer list was read")
	default:
	}
	close(release)
	<-done
	next(t, got)
	// A ring whose context ends first gives up waiting (and rings nobody).
	r2, err := NewRinger(testKey, func(ctx context.Context) ([]Peer, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}, RingerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r2.Ring(ctx, "q", Wake{Name: "q"})
}

func TestRingTakesTurns(t *testing.T) {
	a, gotA := listen(t, testKey, BellOptions{})
	b, gotB := listen(t, testKey, BellOptions{})
	r, _ := ringer(t, testKey, RingerOptions{}, Peer{Addr: a.Addr().String(), Queues: []string{"q"}}, Peer{Addr: b.Addr().String(), Queues: []string{"q"}})
	for _, name := range []string{"1", "2", "3", "4"} {
		r.Ring(context.Background(), "q", Wake{Name: name})
	}
	for _, got := range []chan Wake{gotA, gotA, gotB, gotB} {
		next(t, got)
	}
	if n := r.Sent(); n != 4 {
		t.Fatalf("sent %d wakes for 4 rings of peers that ack, want 4 (one each)", n)
	}
}

func TestUnackedWakeGoesToTheNextPeer(t *testing.T) {
	dead, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	_ = dead.Close()
	live, got := listen(t, testKey, BellOptions{})
	r, _ := ringer(t, testKey, RingerOptions{Retry: 20 * time.Millisecond}, Peer{Addr: deadAddr, Queues: []string{"q"}}, Peer{Addr: live.Addr().String(), Queues: []string{"q"}})
	r.Ring(context.Background(), "q", Wake{Name: "q"}) // the dead peer's turn
	if w := next(t, got); w.Name != "q" {
		t.Fatalf("got %+v", w)
	}
	if s, _ := r.Status(deadAddr); s.LastRing.IsZero() || !s.LastAck.IsZero() {
		t.Fatalf("the dead peer: %+v, want rung first and never acked", s)
	}
}

func TestRingSkipsUnreachablePeers(t *testing.T) {
	dead, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	_ = dead.Close()
	live, got := listen(t, testKey, BellOptions{})
	c := &clock{t: time.Now()}
	r, _ := ringerAt(t, testKey, RingerOptions{Retry: time.Hour}, c.now, Peer{Addr: deadAddr, Queues: []string{"q"}}, Peer{Addr: live.Addr().String(), Queues: []string{"q"}})
	r.RingAll(context.Background(), "q", Wake{Name: "a"})
	r.RingAll(context.Background(), "q", Wake{Name: "b"})
	next(t, got)
	next(t, got)
	until(t, "the live peer's two acks", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.pending) == 2 // the dead peer's
	})
	c.add(2 * DefaultAckTimeout)
	for _, name := range []string{"1", "2", "3"} {
		r.Ring(context.Background(), "q", Wake{Name: name})
	}
	for range 3 {
		next(t, got) // no retry comes within the hour: each went to the live peer at once
	}
}

// TestPermitWakeArrivesBesideAPlainOne: a permit wake says what it is, and
// is throttled apart from plain wakes of the same queue (one does not
// replace the other).
func TestPermitWakeArrivesBesideAPlainOne(t *testing.T) {
	b, got := listen(t, testKey, BellOptions{})
	r, _ := ringer(t, testKey, RingerOptions{Throttle: time.Hour}, Peer{Addr: b.Addr().String(), Queues: []string{"q"}})
	r.RingAll(context.Background(), "q", Wake{Name: "q"})
	r.RingAll(context.Background(), "q", Wake{Name: "q", Permit: true})
	first, second := next(t, got), next(t, got)
	if first.Permit == second.Permit || first.Control || second.Control {
		t.Fatalf("got %+v and %+v, want one plain wake and one permit wake", first, second)
	}
}
