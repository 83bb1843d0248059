package client_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/azurite"
	"github.com/cmdq-dev/cmdq/storage/azure"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// uniquePrefix returns a storage prefix no other test uses ("t" + 9 random
// lowercase letters and digits), so tests share one Azurite safely.
func uniquePrefix() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	b[0] = 't'
	return string(b)
}

// TestOnAzurite runs the client and API on the Azure driver against Azurite:
// issue, repeat, status, events and every poison operation.
func TestOnAzurite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := azure.Open(ctx, azure.Config{ConnectionString: azurite.ConnectionString(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s := apitest.Start(t, apitest.Options{Store: st, Prefix: uniquePrefix(), Tokens: apitest.Tokens()})
	c := newClient(t, s.URL, client.WithToken(apitest.AllToken))
	res, err := c.Issue(ctx, client.IssueRequest{Type: "SendEmail", Params: json.RawMessage(`{"to":"a@example.com"}`)})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Issue(ctx, client.IssueRequest{Type: "SendEmail", ID: res.ID, Params: json.RawMessage(`{"to":"a@example.com"}`)})
	if err != nil || !again.Existing || again.ID != res.ID {
		t.Fatalf("repeat %+v %v", again, err)
	}
	got, err := c.Get(ctx, res.ID)
	if err != nil || got.State != cmdq.StatePending || got.Type != "SendEmail" {
		t.Fatalf("get %+v %v", got, err)
	}
	// The repeat found the command pending and never started, so it made
	// sure a message exists: on Azure (batch, then enqueue) the first issue
	// may have stopped in between. The second message is a recovery,
	// delayed and claimed (docs/lifecycle.md, "Duplicate messages"); the
	// count includes delayed messages.
	if n := s.QueueCount(t, ""); n != 2 {
		t.Fatalf("queue has %d messages, want 2 (the first issue's and the repeat's)", n)
	}
	poisonFlow(t, s)
}
