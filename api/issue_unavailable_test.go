package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/internal/faultproxy"
	"github.com/cmdq-dev/cmdq/internal/testenv"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

// TestIssueNotQueuedAnswers503: Azure Storage (Azurite behind a fault
// proxy) stores the command, then refuses both its enqueue and the
// reconciler marker. Nothing would ever queue the command, so the API must
// not answer 202: it answers 503 problem+json with Retry-After, and the
// client's retry with the same id queues it (200).
func TestIssueNotQueuedAnswers503(t *testing.T) {
	t.Parallel()
	px := faultproxy.NewHTTP(t, azurite.ConnectionString(t))
	st, err := azure.Open(context.Background(), azure.Config{ConnectionString: px.ConnectionString,
		Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	srv := apitest.Start(t, apitest.Options{Store: st, Prefix: "t" + uuid.NewString()[:8]})
	// The Issuer's own background retry would queue it too; this test is
	// about what the client is told.
	_ = srv.Client.Stop(context.Background()) // stops the background retries

	rq := px.Add(faultproxy.Match{Method: "POST", Path: "/messages"}, faultproxy.Refuse, -1)
	rm := px.Add(faultproxy.Match{Path: testenv.UnqueuedPartition}, faultproxy.Refuse, -1)
	id := uuid.NewString()
	body := `{"id":"` + id + `","type":"demo.echo","params":{"n":1}}`
	r := post(t, srv.URL+"/v1/commands", body)
	p := problem(t, r, http.StatusServiceUnavailable, client.ProblemUnavailable)
	if ra := r.header.Get("Retry-After"); ra != "5" {
		t.Fatalf("Retry-After %q, want 5", ra)
	}
	if !strings.Contains(p.Detail, id) || r.header.Get("Location") != "" {
		t.Fatalf("detail %q does not name the command, or Location %q set", p.Detail, r.header.Get("Location"))
	}
	if rq.Hits() == 0 || rm.Hits() == 0 || srv.QueueCount(t, "") != 0 {
		t.Fatalf("refused %d enqueues, %d markers; queue holds %d", rq.Hits(), rm.Hits(), srv.QueueCount(t, ""))
	}

	px.Remove(rq)
	px.Remove(rm)
	again := decode[client.IssueResponse](t, post(t, srv.URL+"/v1/commands", body), http.StatusOK)
	if again.ID != id || again.Status != cmdq.StatePending || srv.QueueCount(t, "") != 1 {
		t.Fatalf("retry: %+v, queue holds %d (want the command queued once)", again, srv.QueueCount(t, ""))
	}
}
