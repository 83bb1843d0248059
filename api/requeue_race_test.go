package api_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// TestConcurrentRequeue sends 50 requeues of one poisoned command at once,
// on both stores: exactly one is accepted (202), every other is a 409,
// and the command gets one requeued event and one queue message.
func TestConcurrentRequeue(t *testing.T) {
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		s := apitest.Start(t, apitest.Options{Store: env.Store, Prefix: env.Prefix})
		id := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A"}`), http.StatusAccepted).ID
		s.Poison(t, id, "ceiling exceeded", "boom")
		before := s.QueueCount(t, "")

		const n = 50
		codes := make([]int, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/poison/"+id+"/requeue", nil)
				if err != nil {
					t.Error(err)
					return
				}
				r, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = r.Body.Close()
				codes[i] = r.StatusCode
			}()
		}
		close(start)
		wg.Wait()
		count := map[int]int{}
		for _, c := range codes {
			count[c]++
		}
		if count[http.StatusAccepted] != 1 || count[http.StatusConflict] != n-1 {
			t.Fatalf("answers %v, want one 202 and %d × 409", count, n-1)
		}
		evs, err := s.Client.Events(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		requeued := 0
		for _, e := range evs {
			if e.Kind == cmdq.EventRequeued {
				requeued++
			}
		}
		if requeued != 1 {
			t.Fatalf("%d requeued events, want 1: %+v", requeued, evs)
		}
		if got := s.QueueCount(t, ""); got != before+1 {
			t.Fatalf("queue holds %d messages, want %d (one more than before the requeues)", got, before+1)
		}
	})
}
