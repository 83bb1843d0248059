package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// demoCeiling is the demo handlers' poison ceiling (cmdq.DefaultPoisonCeiling).
const demoCeiling = 5

// command is one command a client issues, and what became of the issue.
type command struct {
	ID     string
	Type   string
	Params string
	body   []byte
	// WantPoison: the command is designed to end poisoned (demo.fail with
	// times ≥ the ceiling); every other one is designed to complete.
	WantPoison bool
	// CancelAfter, when above 0, is when after its acceptance the command
	// is cancelled through the API (control.go): it may then end
	// cancelled, or as designed when it ended before the cancel was stored.
	CancelAfter time.Duration
	// Delay, when above 0, is the delay the command is issued with
	// (schedule.go): no handler of it may begin before its runAt.
	Delay time.Duration
	// OrderKey, when set, is the order key the command is issued with
	// (flow.go).
	OrderKey string

	mu         sync.Mutex
	accepted   bool
	acceptedAt time.Time
	code       int    // the first 2xx status
	tries      int    // POSTs sent
	codes      []int  // each POST's answer (0: no answer)
	refused    string // a 4xx answer to a retry of the same body
	lastErr    string
	cancel     cancelState // its cancel requests (CancelAfter)
}

func (c *command) isAccepted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.accepted
}

// newID returns a version 4 UUID drawn from rng (so a seed replays the ids).
func newID(rng *rand.Rand) string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// mix draws n commands of every demo kind from rng. maxSleep bounds
// demo.sleep; a share cancels of them (0..1) get a CancelAfter below
// cancelWithin.
func mix(rng *rand.Rand, n int, maxSleep time.Duration, cancels float64) []*command {
	out := make([]*command, 0, n)
	for i := range n {
		c := &command{ID: newID(rng)}
		switch r := rng.IntN(100); {
		case r < 35:
			c.Type, c.Params = "demo.echo", fmt.Sprintf(`{"n":%d}`, i)
		case r < 55:
			ms := rng.IntN(int(maxSleep/time.Millisecond) + 1)
			c.Type, c.Params = "demo.sleep", fmt.Sprintf(`{"ms":%d}`, ms)
		case r < 63:
			c.Type, c.Params = "demo.fail", fmt.Sprintf(`{"times":%d}`, rng.IntN(3))
		case r < 70:
			// Deferrals (RetryAfter) past the poison ceiling: they do not
			// count toward it (up to MaxDeferrals, 20), so it completes.
			c.Type, c.Params = "demo.fail", fmt.Sprintf(`{"times":%d,"deferMs":%d}`, demoCeiling+rng.IntN(3), 50+rng.IntN(250))
		case r < 75:
			c.Type, c.Params = "demo.fail", fmt.Sprintf(`{"times":%d}`, demoCeiling+rng.IntN(3))
			c.WantPoison = true
		default:
			steps := 1 + rng.IntN(5)
			c.Type, c.Params = "demo.steps", fmt.Sprintf(`{"steps":%d,"failAt":%d}`, steps, rng.IntN(steps+1))
		}
		if rng.Float64() < cancels {
			// Half of them at once (a young pending command, or one just
			// started from its issue's message), half within cancelWithin.
			within := cancelWithin
			if rng.IntN(2) == 0 {
				within = 100 * time.Millisecond
			}
			c.CancelAfter = time.Millisecond + time.Duration(rng.Int64N(int64(within)))
		}
		c.body, _ = json.Marshal(map[string]any{"id": c.ID, "type": c.Type, "params": json.RawMessage(c.Params)})
		out = append(out, c)
	}
	return out
}

// clients issue commands through the HTTP API the way the documented
// contract asks of a client: a client-chosen id, and on a connection error,
// a timeout or a 5xx the same request again, until a 2xx.
type clients struct {
	base    string
	http    *http.Client
	retries atomic.Int64 // POSTs after the first, all commands
	tl      timeline
}

func newClients(base string, tl timeline) *clients {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &clients{base: base, http: &http.Client{Transport: tr, Timeout: 20 * time.Second}, tl: tl}
}

// issueAll issues cmds with `workers` concurrent clients, starting command i
// at start + i/rate, each retried until accepted or until giveUp.
func (cl *clients) issueAll(ctx context.Context, cmds []*command, rate float64, workers int, giveUp time.Time, seed uint64) {
	start := time.Now()
	next := make(chan *command)
	var wg, cancels sync.WaitGroup
	defer cancels.Wait()
	for w := range workers {
		wg.Add(1)
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		go func() {
			defer wg.Done()
			for c := range next {
				cl.issue(ctx, c, giveUp, rng)
				if c.CancelAfter > 0 && c.isAccepted() {
					c.mu.Lock()
					at := c.acceptedAt.Add(c.CancelAfter)
					c.mu.Unlock()
					crng := rand.New(rand.NewPCG(seed, rng.Uint64()))
					cancels.Add(1)
					go func() { defer cancels.Done(); cl.cancel(ctx, c, at, giveUp, crng) }()
				}
			}
		}()
	}
	for i, c := range cmds {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case next <- c:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
}

// issue sends c until a 2xx, a 4xx (a refusal, recorded), or giveUp.
func (cl *clients) issue(ctx context.Context, c *command, giveUp time.Time, rng *rand.Rand) {
	backoff := 50 * time.Millisecond
	for {
		code, err := cl.post(ctx, c)
		c.mu.Lock()
		c.tries++
		c.codes = append(c.codes, code)
		if c.tries > 1 {
			cl.retries.Add(1)
		}
		switch {
		case err == nil && code >= 200 && code < 300:
			c.accepted, c.acceptedAt, c.code = true, time.Now(), code
			c.mu.Unlock()
			return
		case err == nil && code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests:
			c.refused = fmt.Sprintf("try %d answered %d", c.tries, code)
			c.mu.Unlock()
			return
		case err != nil:
			c.lastErr = err.Error()
		default:
			c.lastErr = fmt.Sprintf("HTTP %d", code)
		}
		c.mu.Unlock()
		if ctx.Err() != nil || time.Now().After(giveUp) {
			return
		}
		d := backoff/2 + time.Duration(rng.Int64N(int64(backoff)))
		backoff = min(backoff*2, 2*time.Second)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

func (cl *clients) post(ctx context.Context, c *command) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cl.base+"/v1/commands", bytes.NewReader(c.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.http.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// status returns a command's status through GET /v1/commands/{id}.
func (cl *clients) status(ctx context.Context, id string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.base+"/v1/commands/"+id, nil)
	if err != nil {
		return "", err
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return "not found", nil
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return "", fmt.Errorf("GET /v1/commands/%s: HTTP %d", id, resp.StatusCode)
	}
	var s struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return "", err
	}
	return s.Status, nil
}

// errNotSettled is returned by settle when commands are still not final at
// the deadline.
var errNotSettled = errors.New("commands not final at the deadline")

// settle polls the status of every accepted command until each is final
// (completed, poisoned, discarded or cancelled) or until the deadline; it
// returns the ids still not final.
func (cl *clients) settle(ctx context.Context, cmds []*command, deadline time.Time) ([]string, error) {
	pending := map[string]bool{}
	longDelay := map[string]bool{} // scheduled past the run: settled while scheduled
	for _, c := range cmds {
		if c.isAccepted() {
			pending[c.ID] = true
			longDelay[c.ID] = c.Delay >= stillScheduled
		}
	}
	for {
		ids := make([]string, 0, len(pending))
		for id := range pending {
			ids = append(ids, id)
		}
		var mu sync.Mutex
		work := make(chan string)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					st, err := cl.status(ctx, id)
					if err == nil && (st == "completed" || st == "poisoned" || st == "discarded" || st == "cancelled" ||
						st == "scheduled" && longDelay[id]) {
						mu.Lock()
						delete(pending, id)
						mu.Unlock()
					}
				}
			}()
		}
		for _, id := range ids {
			work <- id
		}
		close(work)
		wg.Wait()
		if len(pending) == 0 {
			return nil, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			left := make([]string, 0, len(pending))
			for id := range pending {
				left = append(left, id)
			}
			return left, errNotSettled
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}
