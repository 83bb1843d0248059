package layout

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
)

// Command IDs that carry their issue day (docs/lifecycle.md, "Retention").
//
// A command is stored in the day table of its ID's day when the ID carries
// a time: the IDs cmdq chooses (UUIDv8, layout below) and clients' UUIDv7
// IDs. Every other ID (a client's UUIDv4, …) is stored in the base table.
// TableOf is a pure function of the ID: no storage call and no clock.
//
// cmdq's UUIDv8 layout (RFC 9562 custom, 106 random bits):
//
//	bytes 0-1   random (spreads partition keys over Azure's range servers)
//	bytes 2-3   the issue day: days since 1970-01-01 UTC, big-endian
//	bytes 4-15  random, except the version (8) and variant (10) bits
const (
	// FirstDay is the earliest plausible day an ID may carry (2024-01-01,
	// days since 1970). An ID whose day is earlier is treated as carrying
	// no time (it goes to the base table).
	FirstDay = 19723
	// LastDay is the latest plausible day (2200-01-01). A UUIDv8's 16-bit
	// day ends at 65535 (2149-06-06) anyway.
	LastDay = 84006
)

const msPerDay = 24 * 60 * 60 * 1000

// DayOf returns the day number (days since 1970-01-01 UTC) of t.
func DayOf(t time.Time) int { return int(t.UnixMilli() / msPerDay) }

// DayTime returns the start (00:00 UTC) of day d.
func DayTime(d int) time.Time { return time.UnixMilli(int64(d) * msPerDay).UTC() }

// NewDayID returns a new command ID that carries day(now): a UUIDv8 in
// cmdq's layout (see the package comment above), 106 random bits.
func NewDayID(now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	binary.BigEndian.PutUint16(b[2:4], uint16(DayOf(now)))
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // variant 10
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// parseUUID decodes a canonical lowercase or uppercase UUID.
func parseUUID(id string) ([16]byte, bool) {
	var b [16]byte
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return b, false
	}
	h := id[0:8] + id[9:13] + id[14:18] + id[19:23] + id[24:]
	if _, err := hex.Decode(b[:], []byte(h)); err != nil {
		return b, false
	}
	return b, true
}

// IDDay returns the day a command ID carries and true when the ID is a
// UUIDv7 or a UUIDv8 (cmdq's layout) with a plausible day (FirstDay ..
// LastDay); otherwise false (the command lives in the base table).
func IDDay(id string) (int, bool) {
	b, ok := parseUUID(id)
	if !ok || b[8]&0xc0 != 0x80 {
		return 0, false
	}
	var day int
	switch b[6] >> 4 {
	case 7:
		var ms [8]byte
		copy(ms[2:], b[0:6])
		day = int(binary.BigEndian.Uint64(ms[:]) / msPerDay)
	case 8:
		day = int(binary.BigEndian.Uint16(b[2:4]))
	default:
		return 0, false
	}
	if day < FirstDay || day > LastDay {
		return 0, false
	}
	return day, true
}

// CheckIssueWindow returns an error wrapping model.ErrIDOutsideWindow when id
// carries a day more than model.IssueWindowPastDays before now's day or more
// than model.IssueWindowFutureDays after it; nil otherwise (IDs that carry no
// time are always accepted). Every UUIDv7 carries a time, also one dated
// before FirstDay or after LastDay (1970, 2527): such an ID is outside the
// window too. A UUIDv8 carries one only in cmdq's layout with a plausible
// day (IDDay); others are not cmdq's and carry none.
func CheckIssueWindow(id string, now time.Time) error {
	day, ok := IDDay(id)
	if !ok {
		day, ok = v7Day(id)
	}
	if !ok {
		return nil
	}
	today := DayOf(now)
	if day < today-model.IssueWindowPastDays || day > today+model.IssueWindowFutureDays {
		return fmt.Errorf("%w: ID %s carries the day %s, but IDs that carry a time (UUIDv7, or cmdq's UUIDv8) are accepted only from %d days before today (%s, UTC) to %d day after it, "+
			"so that a re-issue with the same ID is always recognised; make a new UUIDv7 now, leave the ID empty to get one from cmdq, or use a UUIDv4 (kept in the base table)",
			model.ErrIDOutsideWindow, id, DayTime(day).Format(time.DateOnly), model.IssueWindowPastDays, DayTime(today).Format(time.DateOnly), model.IssueWindowFutureDays)
	}
	return nil
}

// v7Day returns the day a UUIDv7 carries, whatever it is, and true; false
// for any other ID.
func v7Day(id string) (int, bool) {
	b, ok := parseUUID(id)
	if !ok || b[8]&0xc0 != 0x80 || b[6]>>4 != 7 {
		return 0, false
	}
	var ms [8]byte
	copy(ms[2:], b[0:6])
	return int(binary.BigEndian.Uint64(ms[:]) / msPerDay), true
}

// DayTable returns the name of the commands table of day d:
// "<prefix>commands<yyyymmdd>". Every issue and completion names its
// command's table: the date is written by hand, not by time.Format.
func (n Names) DayTable(d int) string {
	y, m, dd := DayTime(d).Date()
	if y < 0 || y > 9999 {
		return n.CommandsTable() + DayTime(d).Format("20060102")
	}
	var buf [64]byte
	b := append(append(buf[:0], n.Prefix...), "commands"...)
	b = append(b, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10),
		byte('0'+int(m)/10), byte('0'+int(m)%10), byte('0'+dd/10), byte('0'+dd%10))
	return string(b)
}

// TableOf returns the name of the table that holds command id: its day
// table when the ID carries a plausible day (see IDDay), else the base
// commands table. A pure function of the ID.
func (n Names) TableOf(id string) string {
	if d, ok := IDDay(id); ok {
		return n.DayTable(d)
	}
	return n.CommandsTable()
}

// ParseDayTable returns the day of a day table's name and true, or false
// when name is not a day table of n's prefix.
func (n Names) ParseDayTable(name string) (int, bool) {
	base := n.CommandsTable()
	if len(name) != len(base)+8 || !strings.EqualFold(name[:len(base)], base) {
		return 0, false
	}
	digits := name[len(base):]
	if _, err := strconv.Atoi(digits); err != nil {
		return 0, false
	}
	t, err := time.Parse("20060102", digits)
	if err != nil || t.Format("20060102") != digits {
		return 0, false
	}
	return DayOf(t), true
}

// Derived IDs (docs/lifecycle.md, "Unique commands" and "Periodic
// commands"): a deterministic UUIDv8 in cmdq's layout, bytes 2-3 the day
// of a time the derivation fixes, the other 106 bits from a SHA-256 of
// what the ID stands for. Every process derives the same ID from the same
// inputs, so a second issue collapses on the first's ID (storage.ErrExists)
// with no other storage call.

// derivedID returns the UUIDv8 for day and the SHA-256 of parts (joined
// by NUL bytes, after a domain tag).
func derivedID(day int, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var b [16]byte
	copy(b[:], h.Sum(nil))
	binary.BigEndian.PutUint16(b[2:4], uint16(day))
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // variant 10
	return formatUUID(b)
}

// UniqueBucket returns the start of the unique window's time bucket that
// holds now: now in UTC truncated to a multiple of window
// (time.Time.Truncate, counted from the zero time, so 1h buckets start on
// the hour, 24h ones at midnight UTC and 7×24h ones on Mondays).
func UniqueBucket(now time.Time, window time.Duration) time.Time {
	return now.UTC().Truncate(window)
}

// UniqueID returns the ID of the command of type cmdType with unique key
// key whose window (its length window) holds now: it carries the day of
// the bucket's start and derives from the type, the key, the window and
// the bucket's start.
func UniqueID(cmdType, key string, window time.Duration, now time.Time) string {
	b := UniqueBucket(now, window)
	return derivedID(DayOf(b), "cmdq.unique", cmdType, key, strconv.FormatInt(int64(window), 10), strconv.FormatInt(b.UnixNano(), 10))
}

// TickID returns the command ID of periodic schedule name's tick at tick:
// it carries the tick's day and derives from the name and the tick time
// (to the nanosecond).
func TickID(name string, tick time.Time) string {
	return derivedID(DayOf(tick), "cmdq.periodic", name, strconv.FormatInt(tick.UnixNano(), 10))
}
