package apitest

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage"
)

// Wake-ups between processes for the tests of what the API and the
// console say about them (ProcessorInfo.Wake and WakeUnreachable,
// ProcessorHealth.Wake and Unreachable): a processor in "another
// process" (a Client of its own on the same store) whose doorbell cannot
// be reached. Only a store shared between processes (Azure, Azurite in
// tests) has a doorbell.

// PeerCommand is the command type StartPeer's processor handles
// ("apitest.peer", queue "commands"); it completes at once.
type PeerCommand struct{}

// CommandType names the type.
func (PeerCommand) CommandType() string { return "apitest.peer" }

// DeadDoorbell returns a loopback UDP address nothing listens on: a
// doorbell whose wake-ups are never acked, as behind a firewall.
func DeadDoorbell(t testing.TB) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("apitest: listen UDP: %v", err)
	}
	addr := c.LocalAddr().String()
	_ = c.Close()
	return addr
}

// StartPeer starts a processor of queue "commands" on st under prefix,
// named name, in a Client of its own (as another process's), its doorbell
// advertising advertise ("" for the address it listens on). It runs
// until the test ends. st must be the store itself, which holds the
// secret of the wake-ups (storage.SharedSecret), not a wrapper that
// hides it.
func StartPeer(t testing.TB, st storage.Store, prefix, name, advertise string) *cmdq.Client {
	t.Helper()
	c, err := cmdq.New(st, cmdq.Config{Prefix: prefix, Worker: name, MinPollInterval: 10 * time.Millisecond, MaxPollInterval: time.Second,
		ReconcileInterval: cmdq.NoReconcile, Doorbell: cmdq.Doorbell{Advertise: advertise}})
	if err != nil {
		t.Fatalf("apitest: peer: %v", err)
	}
	if err := cmdq.Register(c, func(context.Context, PeerCommand, *cmdq.Attempt) error { return nil }); err != nil {
		t.Fatalf("apitest: peer: %v", err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("apitest: peer: start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// RingUntilUnreachable makes s's Client ring the doorbell at addr (a
// processor's, listed in its heartbeat) until s's health names it
// unreachable: it issues PeerCommands through s, each of which rings a
// processor of queue "commands" when s has no processor there of its own,
// every 100 ms, failing the test after 30 s. It waits first until s's
// processors' list has the processor at addr, so that s rings it.
func (s *Server) RingUntilUnreachable(t testing.TB, addr string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, err := s.Client.Processors(ctx) // also what s rings from
		if err == nil && slices.ContainsFunc(ps, func(p cmdq.ProcessorInfo) bool { return p.Wake == addr && !p.Gone }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("apitest: no processor listed with doorbell %s after 30 s (%v): %+v", addr, err, ps)
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
	}
	for !slices.Contains(s.Client.Health().Unreachable, addr) {
		if time.Now().After(deadline) {
			t.Fatalf("apitest: %s not unreachable after 30 s of wake-ups: health %+v", addr, s.Client.Health())
		}
		if _, err := s.Client.IssueRaw(ctx, cmdq.Raw{Type: PeerCommand{}.CommandType(), Params: json.RawMessage(`{}`)}); err != nil {
			t.Fatalf("apitest: issue: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // paces the wake-ups: the first unacked must be over a second old
	}
}
