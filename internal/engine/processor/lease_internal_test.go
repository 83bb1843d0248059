package processor

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/registry"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

type leaseCmd struct{}

func (leaseCmd) CommandType() string { return "test.lease" }

func TestLeaseGrowsAfterLostLeasesBounded(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := registry.NewRegistry()
	if err := registry.Register(reg, func(context.Context, leaseCmd, *registry.Attempt) error { return nil }, registry.Options{Lease: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	p, err := New(st, reg, Config{LeaseGrowth: LeaseGrowth{Threshold: 2, Factor: 2, MaxFactor: 5}})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{2, 2, 4, 4, 8, 8, 10, 10, 10}
	for i, w := range want {
		if got := p.LeaseOf("test.lease"); got != w*time.Second {
			t.Fatalf("after %d lost leases: lease %s, want %s", i, got, w*time.Second)
		}
		p.leaseLost(&keeper{cmdType: "test.lease"})
	}
	if v := p.visibility(p.byName["commands"]); v != 2*time.Second {
		t.Fatalf("queue visibility %s, want the definition's lease 2s (a grown lease is taken per message)", v)
	}
}
