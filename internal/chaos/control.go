package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Cancels and pauses during the chaos (issue 18): some accepted commands
// are cancelled through the API a moment after they were accepted, and the
// demo handlers' queue is paused and resumed now and then, while processes
// are killed and storage fails. The checks (check.go) hold every cancel
// and every pause to what the API answered.

// cancelWithin bounds when a command is cancelled after its acceptance,
// so that cancels meet pending (even young ones, which a processor could
// start from the issue's own message), running and ended commands.
const cancelWithin = 2 * time.Second

// cancelTolerance is how long after a cancel's 2xx answer a handler may
// still begin: a delivery that read the command just before the cancel was
// stored starts it right after its read's answer, which the injected
// latency delays (at most 800 ms).
const cancelTolerance = time.Second

// pauseBound is the contract: no processor starts a command of a paused
// queue later than this after the pause was answered.
const pauseBound = 10 * time.Second

// cancelState is what became of a command's cancel requests.
type cancelState struct {
	sent       time.Time // the first request
	tries      int
	code       int       // the last definite answer (2xx, 404, 409, …); 0: none
	answeredAt time.Time // when the first 2xx came back
	lastErr    string
}

// cancel cancels c through POST /v1/commands/{id}/cancel at `at`, retrying
// on connection errors and 5xx (and 429) until a definite answer or giveUp.
func (cl *clients) cancel(ctx context.Context, c *command, at, giveUp time.Time, rng *rand.Rand) {
	if d := time.Until(at); d > 0 && !waitCtx(ctx, d) {
		return
	}
	backoff := 50 * time.Millisecond
	for {
		c.mu.Lock()
		if c.cancel.sent.IsZero() {
			c.cancel.sent = time.Now()
		}
		c.cancel.tries++
		c.mu.Unlock()
		code, err := cl.postEmpty(ctx, "/v1/commands/"+c.ID+"/cancel")
		now := time.Now()
		c.mu.Lock()
		switch {
		case err != nil:
			c.cancel.lastErr = err.Error()
		case code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout:
			c.cancel.lastErr = fmt.Sprintf("HTTP %d", code)
		default:
			c.cancel.code = code
			if code/100 == 2 && c.cancel.answeredAt.IsZero() {
				c.cancel.answeredAt = now
			}
			c.mu.Unlock()
			cl.tl.logf("cancel %s: HTTP %d after %d tries", c.ID, code, c.cancel.tries)
			return
		}
		c.mu.Unlock()
		if ctx.Err() != nil || now.After(giveUp) {
			return
		}
		d := backoff/2 + time.Duration(rng.Int64N(int64(backoff)))
		backoff = min(backoff*2, 2*time.Second)
		if !waitCtx(ctx, d) {
			return
		}
	}
}

// postEmpty sends a POST without a body and returns the status.
func (cl *clients) postEmpty(ctx context.Context, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cl.base+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// pauseWindow is one pause of the demo handlers' queue: from the pause's
// 2xx answer to the sending of the resume that ended it.
type pauseWindow struct {
	paused, resumeSent time.Time
}

// pauses records the pause windows of a run.
type pauses struct {
	mu      sync.Mutex
	windows []pauseWindow
	failed  int // pauses or resumes never answered 2xx
}

// queueAction POSTs /v1/queues/commands/{action} until a 2xx (true), or
// until ctx ends (false). sent is when the first request was sent (one
// whose answer was lost may have been applied), answered when the 2xx
// came.
func (cl *clients) queueAction(ctx context.Context, action string) (sent, answered time.Time, ok bool) {
	backoff := 50 * time.Millisecond
	sent = time.Now()
	for {
		code, err := cl.postEmpty(ctx, "/v1/queues/"+commandsQueue+"/"+action)
		if err == nil && code/100 == 2 {
			cl.tl.logf("queue %s: %s (HTTP %d)", commandsQueue, action, code)
			return sent, time.Now(), true
		}
		if err == nil && code/100 == 4 && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout {
			cl.tl.logf("queue %s: %s refused: HTTP %d", commandsQueue, action, code)
			return sent, time.Time{}, false
		}
		if !waitCtx(ctx, backoff) {
			return sent, time.Time{}, false
		}
		backoff = min(backoff*2, time.Second)
	}
}

// pauseLoop pauses the demo handlers' queue now and then while ctx lasts:
// a gap of 4–10 s, then a pause of 11–15 s (the first, and every other
// one) or 2–4 s, so that pauses outlast the 10 s within which every
// processor must have stopped starting its commands. The last pause is always resumed, even
// after ctx ended.
func (w *world) pauseLoop(ctx context.Context, cl *clients, rng *rand.Rand) {
	for i := 0; ; i++ {
		if !waitRand(ctx, rng, [2]time.Duration{4 * time.Second, 10 * time.Second}) {
			return
		}
		_, answered, ok := cl.queueAction(ctx, "pause")
		if !ok {
			if ctx.Err() == nil {
				w.pauses.mu.Lock()
				w.pauses.failed++
				w.pauses.mu.Unlock()
			}
			// The pause may have been stored after all: resume below.
		}
		hold := between(rng, 11*time.Second, 15*time.Second)
		if i%2 == 1 {
			hold = between(rng, 2*time.Second, 4*time.Second)
		}
		waitCtx(ctx, hold)
		// Resume whatever happens to ctx: the run must drain.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		sent, _, rok := cl.queueAction(rctx, "resume")
		cancel()
		w.pauses.mu.Lock()
		if ok {
			w.pauses.windows = append(w.pauses.windows, pauseWindow{paused: answered, resumeSent: sent})
		}
		if !rok {
			w.pauses.failed++
		}
		w.pauses.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
	}
}
