package cmdq

import (
	"context"
	"sort"
	"time"
)

// LimitInfo is one command type's global concurrency limit and the
// permits held under it, and its rate limit (Client.Limits; GET
// /v1/limits).
type LimitInfo struct {
	// Type is the command type.
	Type string `json:"type"`
	// Queue is its logical queue ("" for a type this Client does not
	// know).
	Queue string `json:"queue,omitempty"`
	// Limit is its GlobalConcurrency as this Client applies it
	// (Config.GlobalConcurrency over HandlerOptions.GlobalConcurrency); 0
	// for a type this Client does not limit (one with a rate only, or
	// whose permits are held by processors that limit it).
	Limit int `json:"limit"`
	// InUse counts the permits held and not expired.
	InUse int `json:"inUse"`
	// Waiting counts the type's messages waiting for a permit in this
	// Client's processor (other processes' waits are not stored).
	Waiting int `json:"waitingHere"`
	// Permits are the permits held, by slot (expired ones included, until
	// a taker replaces them).
	Permits []PermitInfo `json:"permits"`
	// Rate is its rate limit and its use, for a type this Client rates
	// (Config.Rates over HandlerOptions.Rate) or whose ledger holds
	// tokens that still count; nil for none.
	Rate *RateInfo `json:"rate,omitempty"`
	// KeyLimit is its GlobalConcurrencyPerKey as this Client applies it
	// (0: none known here).
	KeyLimit int `json:"keyLimit,omitempty"`
	// KeyRate is its RatePerKey as this Client applies it (Used and
	// NextFree unset: each key's are in Keys); nil for none known here.
	KeyRate *RateInfo `json:"keyRate,omitempty"`
	// Keys are its limit keys that hold permits or have rate tokens that
	// still count, by key (empty for a type not limited per key).
	Keys []KeyInfo `json:"keys,omitempty"`
}

// KeyInfo is one busy limit key of a type limited per key (LimitInfo.Keys).
type KeyInfo struct {
	// Key is the limit key (its first 256 characters).
	Key string `json:"key"`
	// InUse counts its permits held and not expired (they are listed in
	// LimitInfo.Permits with this Key).
	InUse int `json:"inUse"`
	// RateUsed counts its rate tokens that still count; RateNextFree is
	// when its next start is free (UTC; zero when it has no ledger).
	RateUsed     int       `json:"rateUsed"`
	RateNextFree time.Time `json:"rateNextFree,omitzero"`
}

// PermitInfo is one permit of a globally limited type (LimitInfo).
type PermitInfo struct {
	// Slot is the permit's number, 0 to the limit-1.
	Slot int `json:"slot"`
	// Key is the limit key of a per-key permit (GlobalConcurrencyPerKey),
	// "" for one of the type's own.
	Key string `json:"key,omitempty"`
	// Worker is the holding processor's name; Processor its instance ID
	// (ProcessorInfo.ID).
	Worker    string `json:"worker"`
	Processor string `json:"processor"`
	// CommandID is the command the holder runs under it.
	CommandID string `json:"commandId"`
	// Since is when it was taken; Expires when it frees itself unless its
	// holder renews it (with the message's lease), UTC.
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires"`
	// Expired is true once Expires (plus the 2 s allowed for clock skew)
	// has passed: the holder is gone or late, and the next taker replaces
	// it.
	Expired bool `json:"expired,omitempty"`
}

// Limits returns every command type with a global concurrency limit or a
// rate that this Client knows, every type whose permits are held, and
// every type whose rate ledger holds tokens that still count, with the
// permits in use and the rate's use, by type name. Cost: two queries
// (the permits' partition and the rate ledgers').
func (c *Client) Limits(ctx context.Context) ([]LimitInfo, error) {
	r, err := c.reader(ctx)
	if err != nil {
		return nil, err
	}
	perms, err := r.ReadPermits(ctx, "")
	if err != nil {
		return nil, err
	}
	by := map[string]*LimitInfo{}
	for _, t := range c.reg.Types() {
		def, ok := c.reg.Lookup(t)
		if !ok {
			continue
		}
		if limit := c.globalLimit(t); limit > 0 || def.GlobalConcurrencyPerKey > 0 {
			by[t] = &LimitInfo{Type: t, Queue: def.Queue, Limit: limit, KeyLimit: def.GlobalConcurrencyPerKey, Permits: []PermitInfo{}}
		}
	}
	if p := c.procLive.Load(); p != nil {
		for _, s := range p.Permits() {
			if li := by[s.Type]; li != nil {
				li.Waiting = s.Waiting
			}
		}
	}
	now := time.Now()
	for _, pm := range perms {
		li := by[pm.Type]
		if li == nil {
			li = &LimitInfo{Type: pm.Type, Permits: []PermitInfo{}}
			by[pm.Type] = li
		}
		expired := pm.Expired(now)
		switch {
		case expired:
		case pm.Key != "":
			keyInfo(li, pm.Key).InUse++
		default:
			li.InUse++
		}
		li.Permits = append(li.Permits, PermitInfo{Slot: pm.Slot, Key: pm.Key, Worker: pm.Worker, Processor: pm.Holder, CommandID: pm.Command,
			Since: pm.Since.UTC(), Expires: pm.Expires.UTC(), Expired: expired})
	}
	if err := c.addRates(ctx, r, by); err != nil {
		return nil, err
	}
	out := make([]LimitInfo, 0, len(by))
	for _, li := range by {
		sort.Slice(li.Keys, func(i, j int) bool { return li.Keys[i].Key < li.Keys[j].Key })
		out = append(out, *li)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// keyInfo returns li's entry for key, added when missing.
func keyInfo(li *LimitInfo, key string) *KeyInfo {
	for i := range li.Keys {
		if li.Keys[i].Key == key {
			return &li.Keys[i]
		}
	}
	li.Keys = append(li.Keys, KeyInfo{Key: key})
	return &li.Keys[len(li.Keys)-1]
}
