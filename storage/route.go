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
