package registry_test

import (
	"context"
	"fmt"

	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// A retried attempt resumes after the last step a previous attempt
// recorded: the processor passes it as RunInfo.LastStep and persists each
// CompleteStep as a step_completed event before it returns.
func ExampleAttempt_CompleteStep() {
	steps := []string{"reserve stock", "charge card", "send receipt"}
	handle := func(ctx context.Context, run *registry.Attempt) error {
		for i := run.LastStep(); i < len(steps); i++ {
			fmt.Printf("attempt %d: %s\n", run.Number(), steps[i])
			if err := run.CompleteStep(ctx, i+1, steps[i]); err != nil {
				return err
			}
		}
		return nil
	}
	record := func(ctx context.Context, step int, note string) error { return nil }
	// The second attempt of a command whose first recorded step 1.
	run := registry.NewRun(registry.RunInfo{ID: "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d", Type: "orders.place", Attempt: 2, LastStep: 1, Record: record})
	if err := handle(context.Background(), run); err != nil {
		fmt.Println(err)
	}
	fmt.Println("last step", run.LastStep())
	// Output:
	// attempt 2: charge card
	// attempt 2: send receipt
	// last step 3
}
