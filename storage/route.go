package storage

import (
	"context"
	"time"
)

type routingKey struct{}

// WithRoutingKey returns a context whose queue writes concern the entity
// partition key: a store spread over several stores (storage/multi) puts a
// message enqueued with it in the store that holds that partition, so
// that a command's message lives in the account of its rows. Other drivers
// ignore it. cmdq passes the command ID with every enqueue.
func WithRoutingKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, routingKey{}, key)
}

// RoutingKeyFrom returns the key WithRoutingKey put in ctx, and whether
// there is one.
func RoutingKeyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(routingKey{}).(string)
	return k, ok && k != ""
}

// Members is an optional interface of a Store spread over several stores
// (storage/multi: several Azure Storage accounts): it reports each member's
// state, so that health endpoints can say which one is failing. Wrappers
// of a store should implement it and answer for the store they wrap.
type Members interface {
	// Members returns the state of each member, in the store's order.
	Members() []MemberState
}

// MemberState is one member of a spread store (Members).
type MemberState struct {
	// Name identifies the member (an account name and endpoint).
	Name string
	// Healthy is false from a call that failed with ErrUnavailable until
	// a call succeeds again.
	Healthy bool
	// Since is when Healthy last changed (zero if it never did).
	Since time.Time
	// LastError is the error that made the member unhealthy ("" while
	// healthy).
	LastError string
}

// MembersOf returns st's members' states when st implements Members, else
// nil.
func MembersOf(st Store) []MemberState {
	if m, ok := st.(Members); ok {
		return m.Members()
	}
	return nil
}

// Replicated is an optional interface of a Table of a store spread over
// several stores (storage/multi: several Azure Storage accounts). It
// gives the caller the table in each member, for the partitions it keeps
// in several members itself: a deployment's shared rows (cmdq's queue
// control rows, reconciler markers, day-table registrations, processor
// heartbeats and periodic schedules), so that any member that answers can
// serve them while another is down.
//
// A replica's calls go to its member only, whatever the partition key
// (the store's placement by key does not apply). A replica whose member
// is known to be unavailable fails at once with an error wrapping
// ErrUnavailable, without trying it: the store's other calls probe it,
// so that a replicated read or write never waits on a lost member.
// Wrappers of a table (storage/instrument) implement it by wrapping each
// replica; ReplicasOf tells whether a table really is replicated.
type Replicated interface {
	// Replicas returns the table in each member, in the store's order
	// (the same slice length and order on every call).
	Replicas() []Table
	// ReplicaOf returns the index in Replicas of the member that holds
	// partitionKey under the store's placement by key.
	ReplicaOf(partitionKey string) int
}

// ReplicasOf returns tb's replicas when tb is a table of a store spread
// over two or more members (Replicated), else nil: the caller keeps its
// shared partitions in tb itself.
func ReplicasOf(tb Table) []Table {
	r, ok := tb.(Replicated)
	if !ok {
		return nil
	}
	if reps := r.Replicas(); len(reps) >= 2 {
		return reps
	}
	return nil
}

// ReplicaOf returns the index among ReplicasOf(tb) of the member that
// holds partitionKey (0 when tb is not replicated).
func ReplicaOf(tb Table, partitionKey string) int {
	if r, ok := tb.(Replicated); ok {
		return r.ReplicaOf(partitionKey)
	}
	return 0
}
