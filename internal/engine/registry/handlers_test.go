package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

type sendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (sendEmail) CommandType() string { return "mail.Send" }

type resize struct {
	Image string `json:"image"`
}

func (*resize) CommandType() string { return "img.Resize" }

type badName struct{}

func (badName) CommandType() string { return "bad name" }

func TestRegisterAndInvoke(t *testing.T) {
	t.Parallel()
	reg := registry.NewRegistry()
	var got sendEmail
	err := registry.Register(reg, func(ctx context.Context, cmd sendEmail, run *registry.Attempt) error {
		got = cmd
		if run.ID() != "id-1" || run.Number() != 2 || run.Type() != "mail.Send" {
			return fmt.Errorf("run %s %d %s", run.ID(), run.Number(), run.Type())
		}
		return nil
	}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var gotPtr *resize
	if err := registry.Register(reg, func(ctx context.Context, cmd *resize, run *registry.Attempt) error {
		gotPtr = cmd
		return nil
	}, registry.Options{Queue: "slow", Lease: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if ts := reg.Types(); strings.Join(ts, ",") != "img.Resize,mail.Send" {
		t.Fatalf("types %v", ts)
	}
	if qs := reg.Queues(); strings.Join(qs, ",") != "commands,slow" {
		t.Fatalf("queues %v", qs)
	}
	if q, ok := reg.QueueOf("img.Resize"); q != "slow" || !ok {
		t.Fatal("QueueOf")
	}
	if q, ok := reg.QueueOf("unknown"); q != "" || ok {
		t.Fatal("QueueOf of an unknown type")
	}
	def, ok := reg.Lookup("mail.Send")
	if !ok {
		t.Fatal("lookup")
	}
	if def.PoisonCeiling != 5 || def.Lease != 30*time.Second || def.Timeout != 300*time.Second || def.Queue != "commands" || def.Retry.Base != time.Second {
		t.Fatalf("defaults not applied: %+v", def.Options)
	}
	run := registry.NewRun(registry.RunInfo{ID: "id-1", Type: "mail.Send", Attempt: 2})
	if err := def.Invoke(context.Background(), []byte(`{"to":"a@b","subject":"hi"}`), run); err != nil {
		t.Fatal(err)
	}
	if got != (sendEmail{"a@b", "hi"}) {
		t.Fatalf("decoded %+v", got)
	}
	v, err := def.Decode([]byte(`{"to":"x"}`))
	if err != nil || v.(sendEmail).To != "x" {
		t.Fatalf("Decode: %v %v", v, err)
	}
	pdef, _ := reg.Lookup("img.Resize")
	if err := pdef.Invoke(context.Background(), []byte(`{"image":"a.png"}`), registry.NewRun(registry.RunInfo{})); err != nil || gotPtr == nil || gotPtr.Image != "a.png" {
		t.Fatalf("pointer command: %+v %v", gotPtr, err)
	}
	if _, ok := reg.Lookup("nope"); ok {
		t.Fatal("unknown type found")
	}

	// Params that do not fit the type: a permanent DecodeError, handler not run.
	got = sendEmail{}
	for _, bad := range []string{`{"to":1}`, `{"to":"a","cc":"b"}`, `not json`, `{"to":"a"} {}`} {
		err := def.Invoke(context.Background(), []byte(bad), run)
		var de *registry.DecodeError
		if !errors.As(err, &de) || de.Type != "mail.Send" || !registry.IsPermanent(err) {
			t.Errorf("Invoke(%s): %v", bad, err)
		}
	}
	if got != (sendEmail{}) {
		t.Fatal("handler ran on bad params")
	}
}

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	reg := registry.NewRegistry()
	noop := func(context.Context, sendEmail, *registry.Attempt) error { return nil }
	if err := registry.Register(reg, noop, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := registry.Register(reg, noop, registry.Options{}); !errors.Is(err, model.ErrDuplicateType) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := registry.Register(reg, func(context.Context, badName, *registry.Attempt) error { return nil }, registry.Options{}); err == nil || !strings.Contains(err.Error(), "bad name") {
		t.Fatalf("bad type name: %v", err)
	}
	if err := registry.Register[sendEmail](reg, nil, registry.Options{}); err == nil {
		t.Fatal("nil handler accepted")
	}
	err := registry.Register(registry.NewRegistry(), noop, registry.Options{
		Queue: "Bad Queue", PoisonCeiling: -1, Lease: time.Millisecond, Timeout: -time.Second,
		Retry: model.RetryPolicy{Multiplier: 0.5, Jitter: 3},
	})
	if !errors.Is(err, model.ErrInvalidOptions) {
		t.Fatalf("invalid options: %v", err)
	}
	for _, want := range []string{"Queue", "PoisonCeiling", "Lease", "Timeout", "Multiplier", "Jitter"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("options error does not mention %s: %v", want, err)
		}
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("card declined")
	p := registry.Permanent(base)
	if !registry.IsPermanent(p) || !errors.Is(p, base) || !registry.IsPermanent(fmt.Errorf("wrapped: %w", p)) {
		t.Fatal("Permanent not detected through wrapping")
	}
	if registry.IsPermanent(base) || registry.IsPermanent(nil) || registry.Permanent(nil) != nil {
		t.Fatal("false positive")
	}
}

func TestRunSteps(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var recorded []string
	fail := errors.New("storage down")
	var failing bool
	run := registry.NewRun(registry.RunInfo{ID: "c1", Attempt: 3, LastStep: 2, Record: func(ctx context.Context, step int, note string) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return fail
		}
		recorded = append(recorded, fmt.Sprint(step, ":", note))
		return nil
	}})
	if run.LastStep() != 2 {
		t.Fatalf("LastStep %d", run.LastStep())
	}
	ctx := context.Background()
	if err := run.CompleteStep(ctx, 3, "charged"); err != nil || run.LastStep() != 3 {
		t.Fatalf("step 3: %v, last %d", err, run.LastStep())
	}
	if err := run.CompleteStep(ctx, 1, "redo"); err != nil || run.LastStep() != 3 {
		t.Fatalf("repeated earlier step moved LastStep to %d (%v)", run.LastStep(), err)
	}
	if err := run.CompleteStep(ctx, 0, ""); !errors.Is(err, model.ErrInvalidStep) {
		t.Fatalf("step 0: %v", err)
	}
	failing = true
	if err := run.CompleteStep(ctx, 4, ""); !errors.Is(err, fail) || run.LastStep() != 3 {
		t.Fatalf("failed record: %v, last %d", err, run.LastStep())
	}
	if strings.Join(recorded, ",") != "3:charged,1:redo" {
		t.Fatalf("recorded %v", recorded)
	}
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	fixed := func(v float64) func() float64 { return func() float64 { return v } }
	p := model.RetryPolicy{Jitter: model.NoJitter}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		if d := p.Delay(i + 1); d != w {
			t.Errorf("attempt %d: %s, want %s", i+1, d, w)
		}
	}
	if d := p.Delay(0); d != time.Second {
		t.Errorf("attempt 0: %s", d)
	}
	if d := p.Delay(20); d != 5*time.Minute {
		t.Errorf("attempt 20: %s, want the 5m cap", d)
	}
	if d := p.Delay(100000); d != 5*time.Minute {
		t.Errorf("attempt 100000: %s, want the 5m cap", d)
	}
	// Jitter bounds: factor in [0.8, 1.2].
	lo := model.RetryPolicy{Rand: fixed(0)}.Delay(3)
	hi := model.RetryPolicy{Rand: fixed(0.999999)}.Delay(3)
	mid := model.RetryPolicy{Rand: fixed(0.5)}.Delay(3)
	if lo != 3200*time.Millisecond || mid != 4*time.Second || hi < 4799*time.Millisecond || hi > 4800*time.Millisecond {
		t.Errorf("jitter: lo %s mid %s hi %s", lo, mid, hi)
	}
	// Default Rand stays within the bounds and actually varies.
	seen := map[time.Duration]bool{}
	for i := 0; i < 200; i++ {
		d := model.RetryPolicy{}.Delay(2)
		if d < 1600*time.Millisecond || d > 2400*time.Millisecond {
			t.Fatalf("delay %s outside [1.6s, 2.4s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("jitter produced only %d distinct delays", len(seen))
	}
	custom := model.RetryPolicy{Base: 100 * time.Millisecond, Max: time.Second, Multiplier: 3, Jitter: model.NoJitter}
	if d := custom.Delay(3); d != 900*time.Millisecond {
		t.Errorf("custom attempt 3: %s", d)
	}
	if d := custom.Delay(4); d != time.Second {
		t.Errorf("custom attempt 4: %s", d)
	}
	if err := (model.RetryPolicy{Base: time.Hour, Max: time.Minute}).Validate(); err == nil {
		t.Error("Max < Base accepted")
	}
}
