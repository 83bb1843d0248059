package quickstart_test

import (
	"context"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/cmdqtest"
)

// TestGreeting is how a program tests its own handlers with the test kit:
// a client on a temporary store, the command issued and drained, its
// outcome and history checked.
func TestGreeting(t *testing.T) {
	t.Parallel()
	c := cmdqtest.New(t)
	var greeted []string
	if err := cmdq.Register(c, func(ctx context.Context, cmd SendGreeting, run *cmdq.Attempt) error {
		greeted = append(greeted, cmd.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Issue(context.Background(), SendGreeting{Name: "Grace"})
	if err != nil {
		t.Fatal(err)
	}
	cmdqtest.Drain(t, c)
	cmdqtest.RequireState(t, c, res.ID, cmdq.StateCompleted)
	cmdqtest.RequireEvents(t, c, res.ID, cmdq.EventCreated, cmdq.EventStarted, cmdq.EventCompleted)
	if len(greeted) != 1 || greeted[0] != "Grace" {
		t.Fatalf("greeted %v", greeted)
	}
}
