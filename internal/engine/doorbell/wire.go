// Package doorbell carries wake-ups between processes: a process that
// makes work due on a queue (an issue, a requeue, a resume, a retry) rings
// the processors of that queue on other machines, and their pollers
// dequeue at once instead of at the end of their poll backoff (up to a
// minute). Azure Storage has no push; this is cmdq's.
//
// A wake is one UDP datagram that names only a queue (a logical queue or
// one shard's storage name) and, optionally, when work on it becomes due.
// It is authenticated with a key every process of a deployment shares
// (derived from the storage credentials and the prefix, or given), and
// carries a sender ID, a counter and a timestamp so that a replayed
// datagram is dropped. The receiver answers each accepted wake with an
// authenticated ack, which is how a sender learns that a peer cannot be
// reached. A wake is a hint, never a source of truth: a lost, late,
// duplicated or forged one changes only timing, and without any the
// processors' poll bound holds.
//
// Bell is the receiving side (a processor's listener), Ringer the sending
// side (any process that issues). The package knows nothing of commands
// or storage: the caller says who the peers are (PeerSource) and what a
// wake does (Bell's handler).
package doorbell

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"
)

// The datagram layout (big-endian integers):
//
//	wake: "CQDB" | kind 1, 3 or 4 | sender ID (8) | counter (8) | sent, unix
//	      ms (8) | due, unix ms, 0 = now (8) | name length (1) | name | MAC
//	      (16)
//	ack:  "CQDB" | kind 2 | sender ID (8) | counter (8) | MAC (16)
//
// MAC is HMAC-SHA-256 over every byte before it, with the deployment's
// key, cut to 16 bytes.
const (
	magic       = "CQDB"
	kindWake    = 1
	kindAck     = 2
	kindControl = 3 // a wake whose queue was paused or resumed
	kindPermit  = 4 // a permit of a globally limited type on the queue was given back
	macLen      = 16
	// MaxNameLength is the longest queue name a wake carries: a storage
	// queue name (63 characters).
	MaxNameLength = 63
	wakeHead      = 4 + 1 + 8 + 8 + 8 + 8 + 1
	ackLen        = 4 + 1 + 8 + 8 + macLen
	maxDatagram   = wakeHead + MaxNameLength + macLen
)

// Wake is one wake-up: work on queue Name is due at At (zero: now).
type Wake struct {
	// Name is a logical queue ("commands") or one shard's storage queue
	// name ("cmdq-jobs-s2"), as the processor's Notify takes it.
	Name string
	// At, when not zero, is when the work becomes due (a scheduled
	// command, a retry): the processor wakes itself then.
	At time.Time
	// Control says the queue was paused or resumed: the processor reads
	// the queues' control rows again.
	Control bool
	// Permit says a permit of a globally limited command type routed to
	// the queue was given back: the processor's messages waiting for one
	// try again (no poll of the queue). Not with Control.
	Permit bool
}

// Key derives the key of a deployment from a secret every process has (a
// storage account key, or one given) and the storage prefix: deployments
// on one account with different prefixes cannot wake each other.
func Key(secret []byte, prefix string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("cmdq doorbell v1\x00"))
	m.Write([]byte(prefix))
	return m.Sum(nil)
}

// sealer computes MACs with one key.
type sealer struct{ key []byte }

func (s sealer) mac(b []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(b)
	return m.Sum(nil)[:macLen]
}

// header is what identifies a datagram for replay and acks.
type header struct {
	sender  uint64
	counter uint64
}

func (s sealer) encodeWake(h header, sent time.Time, w Wake) ([]byte, error) {
	if len(w.Name) == 0 || len(w.Name) > MaxNameLength {
		return nil, errors.New("doorbell: queue name must be 1 to 63 bytes")
	}
	b := make([]byte, 0, maxDatagram)
	b = append(b, magic...)
	kind := byte(kindWake)
	switch {
	case w.Control:
		kind = kindControl
	case w.Permit:
		kind = kindPermit
	}
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, h.sender)
	b = binary.BigEndian.AppendUint64(b, h.counter)
	b = binary.BigEndian.AppendUint64(b, uint64(sent.UnixMilli()))
	var at uint64
	if !w.At.IsZero() {
		at = uint64(w.At.UnixMilli())
	}
	b = binary.BigEndian.AppendUint64(b, at)
	b = append(b, byte(len(w.Name)))
	b = append(b, w.Name...)
	return append(b, s.mac(b)...), nil
}

// errForged is a datagram whose layout or MAC is wrong.
var errForged = errors.New("doorbell: not a datagram of this deployment")

func (s sealer) decodeWake(b []byte) (header, time.Time, Wake, error) {
	if len(b) < wakeHead+1+macLen || len(b) > maxDatagram || string(b[:4]) != magic || (b[4] != kindWake && b[4] != kindControl && b[4] != kindPermit) {
		return header{}, time.Time{}, Wake{}, errForged
	}
	n := int(b[wakeHead-1])
	if n == 0 || len(b) != wakeHead+n+macLen {
		return header{}, time.Time{}, Wake{}, errForged
	}
	body := b[:len(b)-macLen]
	if !hmac.Equal(s.mac(body), b[len(body):]) {
		return header{}, time.Time{}, Wake{}, errForged
	}
	h := header{sender: binary.BigEndian.Uint64(b[5:]), counter: binary.BigEndian.Uint64(b[13:])}
	sent := time.UnixMilli(int64(binary.BigEndian.Uint64(b[21:])))
	w := Wake{Name: string(b[wakeHead : wakeHead+n]), Control: b[4] == kindControl, Permit: b[4] == kindPermit}
	if at := binary.BigEndian.Uint64(b[29:]); at != 0 {
		w.At = time.UnixMilli(int64(at))
	}
	return h, sent, w, nil
}

func (s sealer) encodeAck(h header) []byte {
	b := make([]byte, 0, ackLen)
	b = append(b, magic...)
	b = append(b, kindAck)
	b = binary.BigEndian.AppendUint64(b, h.sender)
	b = binary.BigEndian.AppendUint64(b, h.counter)
	return append(b, s.mac(b)...)
}

func (s sealer) decodeAck(b []byte) (header, error) {
	if len(b) != ackLen || string(b[:4]) != magic || b[4] != kindAck {
		return header{}, errForged
	}
	body := b[:len(b)-macLen]
	if !hmac.Equal(s.mac(body), b[len(body):]) {
		return header{}, errForged
	}
	return header{sender: binary.BigEndian.Uint64(b[5:]), counter: binary.BigEndian.Uint64(b[13:])}, nil
}
