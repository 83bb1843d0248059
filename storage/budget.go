package storage

import (
	"context"
	"time"
)

// CallBudget bounds the storage calls made with a context: how long one try
// of a call may take and how often a failed try is retried. A caller that
// must answer quickly (an HTTP request) sets a short budget with
// WithCallBudget; callers without one (the processor) get the driver's own
// retry settings.
type CallBudget struct {
	// PerTry bounds one try of a call (one HTTP request to the service).
	// 0 keeps the driver's setting.
	PerTry time.Duration
	// MaxRetries is how many times a failed try is retried after the first;
	// 0 means no retries.
	MaxRetries int
}

type callBudgetKey struct{}

// WithCallBudget returns a context whose storage calls each try for at most
// perTry (0 keeps the driver's per-try timeout) and retry a failed try at
// most maxRetries times (0: none; negative counts as 0). Drivers whose calls
// do not go over a network ignore it (the embedded driver); the Azure driver
// applies it to every request made with the context. The context's own
// deadline still bounds the whole call.
func WithCallBudget(ctx context.Context, perTry time.Duration, maxRetries int) context.Context {
	if perTry < 0 {
		perTry = 0
	}
	if maxRetries < 0 {
		maxRetries = 0
	}
	return context.WithValue(ctx, callBudgetKey{}, CallBudget{PerTry: perTry, MaxRetries: maxRetries})
}

// CallBudgetFrom returns the budget WithCallBudget put in ctx, and whether
// there is one.
func CallBudgetFrom(ctx context.Context) (CallBudget, bool) {
	b, ok := ctx.Value(callBudgetKey{}).(CallBudget)
	return b, ok
}
