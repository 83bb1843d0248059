package processor_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

type ping struct{}

func (ping) CommandType() string { return "example.ping" }

// The pieces the cmdq.Client assembles, by hand: a registry, a processor
// and an Issuer that routes by the registry and wakes the processor. Most
// programs use cmdq.New instead.
func ExampleProcessor_RunFor() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "cmdq-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := embedded.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	reg := registry.NewRegistry()
	if err := registry.Register(reg, func(context.Context, ping, *registry.Attempt) error { return nil }); err != nil {
		log.Fatal(err)
	}
	// Until it has timed a handler, RunFor keeps a margin of
	// HandlerDurationEstimate × Tolerance before its end; these handlers
	// take microseconds.
	p, err := processor.New(st, reg, processor.Config{MinPollInterval: 10 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond,
		HandlerDurationEstimate: 10 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	iss, err := issuer.NewIssuer(st, issuer.IssuerOptions{Wake: p.Notify, Routes: reg})
	if err != nil {
		log.Fatal(err)
	}
	defer iss.Close()
	if _, err := iss.IssueMany(ctx, ping{}, ping{}); err != nil {
		log.Fatal(err)
	}
	sum, err := p.RunFor(ctx, 3*time.Second) // 55 s under a one-minute scheduler
	if err != nil {
		log.Fatal(err)
	}
	// Whether it stopped because the queue stayed empty (idle) or because
	// the next handler might not finish in time (deadline) depends on the
	// machine's load; either way it ended on its own.
	fmt.Println("processed", sum.Processed, "completed", sum.Completed, "ended on its own:", sum.StoppedBecause != model.StopCancelled)
	// Output:
	// processed 2 completed 2 ended on its own: true
}
