package embedded

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cmdq-dev/cmdq/storage"
)

// Entity record layout, format 2:
//
//	0xC2 | timestamp unix nanos (8) | property count (uvarint) |
//	per property: key (uvarint) [name] type (1) value
//
// A property's key is id<<1 for a name of the store's name dictionary (the
// name is not repeated in the record), or len<<1|1 followed by the name's
// len bytes for a name outside it. Properties are ordered: dictionary
// names by id, then the others by name. Values: string and []byte as
// uvarint length + bytes; bool 1 byte; int32 4; int64 8; float64 8 (IEEE
// bits); time.Time seconds (8) + nanoseconds (4); a string in the form of
// a W3C traceparent (traceParentForm: version, trace ID, parent ID and
// flags in lower-case hex, the trace context cmdq stores with a traced
// command) as those 26 bytes in binary, type tTraceParent (format 3:
// 27 bytes a value instead of 57). The ETag is derived from the
// timestamp, which is unique per store.
//
// The name dictionary is kept under the keys N<name> (value: the id,
// uvarint), at most maxNames names; a name is added, with a synced write
// of its own, before the first record that uses it, so no record is ever
// durable without its names. Format-1 records (codec_v1.go) start with
// the timestamp's high byte, which is below 0x80 for any time after 1970:
// the first byte tells the formats apart, and Open migrates a format-1
// store (migrate.go).

const (
	tString byte = iota + 1
	tBinary
	tBool
	tInt32
	tInt64
	tFloat64
	tTime
	tTraceParent // format 3
)

// tagV2 starts every format-2 record.
const tagV2 byte = 0xC2

// maxNames bounds the name dictionary; further names are written in full
// in each record.
const maxNames = 4096

var errCorrupt = errors.New("embedded: corrupt entity record")

// names is the store's property name dictionary. Lookups are lock-free
// (copy-on-write snapshots); additions are serialised. A new name gets its
// id at once, in memory; its entry is written in the same engine batch as
// every record that uses it until one such batch is synced (fresh), so no
// record is durable without its names and no write waits for an extra
// sync.
type names struct {
	s    *Store
	mu   sync.Mutex // serialises additions
	snap atomic.Pointer[nameSnap]
}

type nameSnap struct {
	ids   map[string]uint64
	names []string // names[id-1]; "" for an id whose entry never became durable
	// bytes holds the same names as byte slices (read without copying).
	bytes [][]byte
	// fresh: names whose entry is not known durable yet.
	fresh map[string]bool
}

// nameKey is the engine key of a dictionary entry.
func nameKey(name string) []byte { return append([]byte{'N'}, name...) }

// loadNames reads the dictionary (at Open).
func loadNames(s *Store) (*names, error) {
	d := &names{s: s}
	snap := &nameSnap{ids: map[string]uint64{}}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("N"), UpperBound: []byte("O")})
	if err != nil {
		return nil, s.readErr(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, verr := it.ValueAndErr()
		if verr != nil {
			_ = it.Close()
			return nil, s.readErr(verr)
		}
		name := string(it.Key()[1:])
		id, k := binary.Uvarint(v)
		if k <= 0 || id == 0 || id > maxNames {
			_ = it.Close()
			return nil, corrupt(s.dir, s.dir, fmt.Errorf("property name dictionary entry %q has a bad id", name))
		}
		for uint64(len(snap.names)) < id {
			snap.names = append(snap.names, "")
		}
		if snap.names[id-1] != "" {
			_ = it.Close()
			return nil, corrupt(s.dir, s.dir, fmt.Errorf("property name dictionary: id %d is given to both %q and %q", id, snap.names[id-1], name))
		}
		snap.names[id-1] = name
		snap.ids[name] = id
	}
	if err := it.Close(); err != nil {
		return nil, s.readErr(err)
	}
	for _, n := range snap.names {
		snap.bytes = append(snap.bytes, []byte(n))
	}
	d.snap.Store(snap)
	return d, nil
}

// id returns name's dictionary id, adding the name when it is new and the
// dictionary has room (0: the name is written in full), and whether its
// entry must go with the record (fresh).
func (d *names) id(name string) (id uint64, fresh bool) {
	snap := d.snap.Load()
	if id, ok := snap.ids[name]; ok {
		return id, snap.fresh[name]
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.snap.Load()
	if id, ok := old.ids[name]; ok {
		return id, old.fresh[name]
	}
	if len(old.names) >= maxNames {
		return 0, false
	}
	id = uint64(len(old.names)) + 1
	snap = &nameSnap{ids: make(map[string]uint64, len(old.ids)+1), names: append(slices.Clip(old.names), name),
		bytes: append(slices.Clip(old.bytes), []byte(name)), fresh: make(map[string]bool, len(old.fresh)+1)}
	for n, i := range old.ids {
		snap.ids[n] = i
	}
	for n := range old.fresh {
		snap.fresh[n] = true
	}
	snap.ids[name] = id
	snap.fresh[name] = true
	d.snap.Store(snap)
	return id, true
}

// stage adds the entries of the fresh names to b.
func (d *names) stage(b *pebble.Batch, fresh []string) {
	snap := d.snap.Load()
	for _, n := range fresh {
		_ = b.Set(nameKey(n), binary.AppendUvarint(nil, snap.ids[n]), nil)
	}
}

// settle records that the entries of fresh are durable (a batch holding
// them was synced): later records need not carry them.
func (d *names) settle(fresh []string) {
	if len(fresh) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.snap.Load()
	snap := &nameSnap{ids: old.ids, names: old.names, bytes: old.bytes, fresh: make(map[string]bool, len(old.fresh))}
	for n := range old.fresh {
		if !slices.Contains(fresh, n) {
			snap.fresh[n] = true
		}
	}
	d.snap.Store(snap)
}

// name returns the name of dictionary id.
func (n *nameSnap) name(id uint64) ([]byte, bool) {
	if id == 0 || id > uint64(len(n.bytes)) || len(n.bytes[id-1]) == 0 {
		return nil, false
	}
	return n.bytes[id-1], true
}

// encProp is one property being encoded: its dictionary id (0: written
// in full) and its index in the entity's properties.
type encProp struct {
	id uint64
	i  int
}

// compareKeys orders properties: dictionary names by id, then the others
// by name.
func compareKeys(aid uint64, aname []byte, bid uint64, bname []byte) int {
	switch {
	case aid != 0 && bid != 0:
		return cmp.Compare(aid, bid)
	case aid != 0:
		return -1
	case bid != 0:
		return 1
	}
	return bytes.Compare(aname, bname)
}

// encode encodes props (validated) with write time ts in format 2. fresh
// lists the names whose dictionary entries must be written with the
// record (names.stage).
func (d *names) encode(ts time.Time, props map[string]any) (rec []byte, fresh []string) {
	var buf [24]storage.Prop
	ps := buf[:0]
	for name, v := range props {
		p, _ := storage.PropOf(name, v) // validated: no error
		ps = append(ps, p)
	}
	return d.encodeProps(ts, ps)
}

// encodeEntity encodes e's properties (validated): Props, or Properties
// when it has none.
func (d *names) encodeEntity(ts time.Time, e storage.Entity) (rec []byte, fresh []string) {
	if e.Props != nil {
		return d.encodeProps(ts, e.Props)
	}
	return d.encode(ts, e.Properties)
}

// encodeProps is encode for properties in typed form (distinct names).
func (d *names) encodeProps(ts time.Time, props []storage.Prop) (rec []byte, fresh []string) {
	var buf [32]encProp
	ps := buf[:0]
	size := 1 + 8 + uvarintLen(len(props)) // the exact size: one allocation
	for i := range props {
		p := &props[i]
		id, isFresh := d.id(p.Name)
		if isFresh {
			fresh = append(fresh, p.Name)
		}
		ps = append(ps, encProp{id, i})
		if id != 0 {
			size += uvarintLen(int(id << 1))
		} else {
			size += uvarintLen(len(p.Name)<<1|1) + len(p.Name)
		}
		size++
		switch p.Kind() {
		case storage.KindString:
			if x := p.Str(); traceParentForm(x) {
				size += traceParentBytes
			} else {
				size += uvarintLen(len(x)) + len(x)
			}
		case storage.KindBinary:
			size += uvarintLen(len(p.BinaryString())) + len(p.BinaryString())
		case storage.KindBool:
			size++
		case storage.KindInt32:
			size += 4
		case storage.KindInt64, storage.KindFloat64:
			size += 8
		case storage.KindTime:
			size += 12
		}
	}
	slices.SortFunc(ps, func(a, b encProp) int {
		if a.id != 0 || b.id != 0 {
			return compareKeys(a.id, nil, b.id, nil)
		}
		return cmp.Compare(props[a.i].Name, props[b.i].Name)
	})
	b := make([]byte, 9, size)
	b[0] = tagV2
	putI64(b[1:], ts.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, e := range ps {
		p := &props[e.i]
		if e.id != 0 {
			b = binary.AppendUvarint(b, e.id<<1)
		} else {
			b = binary.AppendUvarint(b, uint64(len(p.Name))<<1|1)
			b = append(b, p.Name...)
		}
		b = appendProp(b, p)
	}
	return b, fresh
}

// appendProp appends a property's type byte and value.
func appendProp(b []byte, p *storage.Prop) []byte {
	switch p.Kind() {
	case storage.KindString:
		x := p.Str()
		if traceParentForm(x) {
			return appendTraceParent(append(b, tTraceParent), x)
		}
		b = append(b, tString)
		b = binary.AppendUvarint(b, uint64(len(x)))
		b = append(b, x...)
	case storage.KindBinary:
		x := p.BinaryString()
		b = append(b, tBinary)
		b = binary.AppendUvarint(b, uint64(len(x)))
		b = append(b, x...)
	case storage.KindBool:
		if p.Bool() {
			b = append(b, tBool, 1)
		} else {
			b = append(b, tBool, 0)
		}
	case storage.KindInt32:
		b = append(b, tInt32)
		b = binary.BigEndian.AppendUint32(b, uint32(p.Int()))
	case storage.KindInt64:
		b = append(b, tInt64)
		b = binary.BigEndian.AppendUint64(b, uint64(p.Int()))
	case storage.KindFloat64:
		b = append(b, tFloat64)
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(p.Float()))
	case storage.KindTime:
		x := p.Time()
		b = append(b, tTime)
		b = binary.BigEndian.AppendUint64(b, uint64(x.Unix()))
		b = binary.BigEndian.AppendUint32(b, uint32(x.Nanosecond()))
	}
	return b
}

// A traceparent (W3C Trace Context): version "-" trace ID "-" parent ID
// "-" flags, 1, 16, 8 and 1 bytes in lower-case hex: 55 characters, 26
// bytes in binary.
const (
	traceParentLen   = 55
	traceParentBytes = 26
)

// traceParentForm reports whether s has a traceparent's form (any
// version, lower-case hex only): such a string is stored in binary
// (tTraceParent) and decodes to the same string.
func traceParentForm(s string) bool {
	if len(s) != traceParentLen || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	for i := 0; i < traceParentLen; i++ {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// appendTraceParent appends the 26 bytes of s (traceParentForm).
func appendTraceParent(b []byte, s string) []byte {
	for i := 0; i < traceParentLen; i += 2 {
		if s[i] == '-' {
			i++
		}
		b = append(b, unhex(s[i])<<4|unhex(s[i+1]))
	}
	return b
}

// unhex is the value of a lower-case hex digit.
func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// formatTraceParent returns the traceparent whose 26 bytes v holds.
func formatTraceParent(v []byte) string {
	var s [traceParentLen]byte
	hex.Encode(s[0:2], v[0:1])
	s[2] = '-'
	hex.Encode(s[3:35], v[1:17])
	s[35] = '-'
	hex.Encode(s[36:52], v[17:25])
	s[52] = '-'
	hex.Encode(s[53:55], v[25:26])
	return string(s[:])
}

// uvarintLen is the length of n as binary.AppendUvarint writes it.
func uvarintLen(n int) int {
	return (bits.Len64(uint64(n)|1) + 6) / 7
}

// isV2 reports whether rec is a format-2 record.
func isV2(rec []byte) bool { return len(rec) > 0 && rec[0] == tagV2 }

// recordTimestamp reads the write time of an encoded entity (either format).
func recordTimestamp(rec []byte) int64 {
	if isV2(rec) {
		rec = rec[1:]
	}
	if len(rec) < 8 {
		return 0
	}
	return i64(rec)
}

// decode decodes a record of either format.
func (d *names) decode(rec []byte) (time.Time, map[string]any, error) {
	if !isV2(rec) {
		return decodeEntityV1(rec)
	}
	n, b, err := recordProps(rec)
	if err != nil {
		return time.Time{}, nil, err
	}
	ts := fromNanos(i64(rec[1:]))
	snap := d.snap.Load()
	props := make(map[string]any, n)
	for ; n > 0; n-- {
		var p rawProp
		if p, b, err = nextProp(snap, b); err != nil {
			return ts, nil, err
		}
		v, err := decodeValue(p.enc)
		if err != nil {
			return ts, nil, err
		}
		props[string(p.name)] = v
	}
	return ts, props, nil
}

// decodeValue decodes a property's type byte and value (as nextProp
// delimited them).
func decodeValue(enc []byte) (any, error) {
	v := enc[1:]
	switch enc[0] {
	case tString:
		_, k := binary.Uvarint(v)
		return string(v[k:]), nil
	case tTraceParent:
		return formatTraceParent(v), nil
	case tBinary:
		_, k := binary.Uvarint(v)
		return append([]byte{}, v[k:]...), nil
	case tBool:
		return v[0] == 1, nil
	case tInt32:
		return int32(binary.BigEndian.Uint32(v)), nil
	case tInt64:
		return int64(binary.BigEndian.Uint64(v)), nil
	case tFloat64:
		return math.Float64frombits(binary.BigEndian.Uint64(v)), nil
	case tTime:
		sec := int64(binary.BigEndian.Uint64(v))
		nsec := int64(binary.BigEndian.Uint32(v[8:]))
		return time.Unix(sec, nsec).UTC(), nil
	}
	return nil, fmt.Errorf("%w: unknown property type %d", errCorrupt, enc[0])
}

// etagOf derives an entity's ETag from its write time, in Azure's format.
func etagOf(tsNanos int64) string {
	var buf [etagLen]byte
	return string(appendETag(buf[:0], tsNanos))
}

// etagLen is the length of an ETag of a year 0–9999 write time.
const etagLen = len(`W/"datetime'2006-01-02T15:04:05.000000000Z'"`)

// appendETag appends etagOf(tsNanos) to b.
func appendETag(b []byte, tsNanos int64) []byte {
	// Equivalent to Format("2006-01-02T15:04:05.000000000Z") on the UTC
	// time, written by hand: this runs for every entity written and read.
	t := time.Unix(0, tsNanos).UTC()
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	if year < 0 || year > 9999 {
		return append(b, `W/"datetime'`+t.Format("2006-01-02T15:04:05.000000000Z")+`'"`...)
	}
	b = append(b, `W/"datetime'`...)
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond(), 9)
	return append(b, `Z'"`...)
}

// appendDigits appends v (≥ 0) as exactly width decimal digits.
func appendDigits(b []byte, v, width int) []byte {
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

// rawProp is one property of an encoded format-2 record: its key as
// stored, its id (0: written in full), its name, and its encoded type
// byte plus value.
type rawProp struct {
	key  []byte // the key's bytes as stored (id, or length and name)
	id   uint64
	name []byte
	enc  []byte // type byte and value
	size int    // the value's Azure size (storage.EntitySize's per-value part)
}

// nextProp reads the property at the start of b and returns it and the
// rest; snap resolves dictionary ids (nil: a dictionary property's name
// is left nil, and its size counts no name).
func nextProp(snap *nameSnap, b []byte) (rawProp, []byte, error) {
	key, k := binary.Uvarint(b)
	if k <= 0 {
		return rawProp{}, nil, errCorrupt
	}
	var p rawProp
	v := b[k:]
	if key&1 == 0 {
		p.id = key >> 1
		if snap != nil {
			name, ok := snap.name(p.id)
			if !ok {
				return rawProp{}, nil, fmt.Errorf("%w: property name id %d is not in the dictionary", errCorrupt, p.id)
			}
			p.name = name
		}
	} else {
		l := key >> 1
		if uint64(len(v)) < l {
			return rawProp{}, nil, errCorrupt
		}
		p.name, v = v[:l], v[l:]
	}
	p.key = b[:len(b)-len(v)]
	if len(v) < 1 {
		return rawProp{}, nil, errCorrupt
	}
	typ := v[0]
	n := 1
	switch typ {
	case tString, tBinary:
		l, k := binary.Uvarint(v[1:])
		if k <= 0 || uint64(len(v)-1-k) < l {
			return rawProp{}, nil, errCorrupt
		}
		n += k + int(l)
		if typ == tString {
			p.size = 4 + 2*utf16LenBytes(v[1+k:n])
		} else {
			p.size = 4 + int(l)
		}
	case tBool:
		n, p.size = 2, 1
	case tInt32:
		n, p.size = 5, 4
	case tInt64, tFloat64:
		n, p.size = 9, 8
	case tTime:
		n, p.size = 13, 8
	case tTraceParent:
		n, p.size = 1+traceParentBytes, 4+2*traceParentLen
	default:
		return rawProp{}, nil, fmt.Errorf("%w: unknown property type %d", errCorrupt, typ)
	}
	if len(v) < n {
		return rawProp{}, nil, errCorrupt
	}
	p.enc = v[:n]
	return p, v[n:], nil
}

// recordProps returns the property count of an encoded format-2 record and
// the encoded properties that follow it.
func recordProps(rec []byte) (uint64, []byte, error) {
	if len(rec) < 9 || !isV2(rec) {
		return 0, nil, errCorrupt
	}
	n, k := binary.Uvarint(rec[9:])
	if k <= 0 {
		return 0, nil, errCorrupt
	}
	return n, rec[9+k:], nil
}

// merge merges the encoded patch into the encoded record cur (Azure's
// Merge: the patch's properties replace or add to cur's) without decoding
// values, and stamps the result with ts. Both records keep their
// properties in key order (encode's), so the result is byte for byte what
// encode would produce for the merged property map. A format-1 cur is
// re-encoded first (fresh: the dictionary entries that needs, to write
// with the result; Open migrates every record, so this is for safety
// only). It enforces the limits a merge can break —
// storage.MaxProperties and storage.MaxEntityBytes (keySize is the keys'
// part of storage.EntitySize) — with errors wrapping storage.ErrTooLarge.
func (d *names) merge(cur, patch []byte, ts time.Time, keySize int) (rec []byte, fresh []string, err error) {
	if !isV2(cur) {
		t, props, err := decodeEntityV1(cur)
		if err != nil {
			return nil, nil, err
		}
		cur, fresh = d.encode(t, props)
	}
	rec, err = mergeRecords(d.snap.Load(), cur, patch, ts.UnixNano(), keySize)
	return rec, fresh, err
}

// mergeRecords merges the encoded patch into the encoded record cur (see
// names.merge) and stamps the result with ts (unix nanos). With snap nil
// it checks no limits and needs no dictionary: the engine's merge
// operator (entityMerger) folds operands with it, each checked by the
// write that made it.
func mergeRecords(snap *nameSnap, cur, patch []byte, ts int64, keySize int) ([]byte, error) {
	return mergeInto(snap, cur, patch, ts, keySize, true)
}

// checkMerge checks the limits the merge of the encoded patch into the
// encoded format-2 record cur would break (see names.merge) without
// building the result: the write of an engine merge operand
// (entityMerger) leaves that to the engine.
func (d *names) checkMerge(cur, patch []byte, keySize int) error {
	_, err := mergeInto(d.snap.Load(), cur, patch, 0, keySize, false)
	return err
}

// mergeInto is mergeRecords, building the result only when build is set
// (and then returning nil).
func mergeInto(snap *nameSnap, cur, patch []byte, ts int64, keySize int, build bool) ([]byte, error) {
	nc, bc, err := recordProps(cur)
	if err != nil {
		return nil, err
	}
	np, bp, err := recordProps(patch)
	if err != nil {
		return nil, err
	}
	// The count is written once known: the body goes after room for its
	// varint and is moved down to meet it at the end.
	const bodyAt = 9 + binary.MaxVarintLen64
	var out, body []byte
	if build {
		out = make([]byte, bodyAt, bodyAt+len(bc)+len(bp))
		out[0] = tagV2
		putI64(out[1:], ts)
		body = out[bodyAt:]
	}
	count, size := 0, keySize
	var pc, pp rawProp
	haveC, haveP := nc > 0, np > 0
	if haveC {
		if pc, bc, err = nextProp(snap, bc); err != nil {
			return nil, err
		}
		nc--
	}
	if haveP {
		if pp, bp, err = nextProp(snap, bp); err != nil {
			return nil, err
		}
		np--
	}
	emit := func(p rawProp) {
		if build {
			body = append(body, p.key...)
			body = append(body, p.enc...)
		}
		count++
		size += 8 + 2*utf16LenBytes(p.name) + p.size
	}
	for haveC || haveP {
		var c int
		switch {
		case !haveP:
			c = -1
		case !haveC:
			c = 1
		default:
			c = compareKeys(pc.id, pc.name, pp.id, pp.name)
		}
		if c <= 0 && haveC {
			if c < 0 {
				emit(pc)
			}
			if haveC = nc > 0; haveC {
				if pc, bc, err = nextProp(snap, bc); err != nil {
					return nil, err
				}
				nc--
			}
		}
		if c >= 0 && haveP {
			emit(pp)
			if haveP = np > 0; haveP {
				if pp, bp, err = nextProp(snap, bp); err != nil {
					return nil, err
				}
				np--
			}
		}
	}
	if snap != nil && count > storage.MaxProperties {
		return nil, fmt.Errorf("%w: merged entity has %d properties; the limit is %d", storage.ErrTooLarge, count, storage.MaxProperties)
	}
	if snap != nil && size > storage.MaxEntityBytes {
		return nil, fmt.Errorf("%w: merged entity is %d bytes; the limit is %d bytes (1 MiB)", storage.ErrTooLarge, size, storage.MaxEntityBytes)
	}
	if !build {
		return nil, nil
	}
	n := 9 + binary.PutUvarint(out[9:bodyAt], uint64(count))
	return append(out[:n], body...), nil
}

// utf16LenBytes is the length in UTF-16 code units of the UTF-8 text b,
// counting each invalid byte as one unit (as ranging over a string does).
func utf16LenBytes(b []byte) int {
	for i, c := range b {
		if c >= utf8.RuneSelf {
			n := i
			s := b[i:]
			for len(s) > 0 {
				r, size := utf8.DecodeRune(s)
				n += utf16.RuneLen(r)
				s = s[size:]
			}
			return n
		}
	}
	return len(b)
}
