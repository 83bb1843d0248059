// Package testkit is a program's own module that tests its handlers with
// cmdqtest only: a command whose handler keeps failing is poisoned after
// its five attempts without waiting for the retry delays, and a command
// scheduled an hour ahead runs when the test moves the clock. cmdq's own
// tests run it (TestOutsideTestKit, in cmdq's root package) as a module
// outside cmdq's, with this replace directive pointing at the checkout.
package testkit

import (
	"context"
	"errors"

	"github.com/cmdq-dev/cmdq"
)

// ChargeCard charges an order's card.
type ChargeCard struct {
	OrderID string `json:"orderId"`
}

// CommandType names the command.
func (ChargeCard) CommandType() string { return "testkit.charge" }

// ErrNetworkDown is what the card network answers in these tests.
var ErrNetworkDown = errors.New("card network down")

// Charge is the handler: it fails while down says so.
func Charge(down func() bool) cmdq.Handler[ChargeCard] {
	return func(ctx context.Context, c ChargeCard, a *cmdq.Attempt) error {
		if down() {
			return ErrNetworkDown
		}
		return a.SetOutput(map[string]string{"charged": c.OrderID})
	}
}
