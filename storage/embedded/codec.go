package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/cmdq-dev/cmdq/storage"
)

// Entity record layout:
//
//	timestamp unix nanos (8) | property count (uvarint) |
//	per property: name len (uvarint) name type (1) value
//
// Values: string and []byte as uvarint length + bytes; bool 1 byte; int32 4;
// int64 8; float64 8 (IEEE bits); time.Time seconds (8) + nanoseconds (4).
// The ETag is derived from the timestamp, which is unique per store.

const (
	tString byte = iota + 1
	tBinary
	tBool
	tInt32
	tInt64
	tFloat64
	tTime
)

var errCorrupt = errors.New("embedded: corrupt entity record")

func encodeEntity(ts time.Time, props map[string]any) []byte {
	names := make([]string, 0, len(props))
	size := 8 + uvarintLen(len(props)) // the exact size: one allocation
	for name, v := range props {
		names = append(names, name)
		size += uvarintLen(len(name)) + len(name) + 1
		switch x := v.(type) {
		case string:
			size += uvarintLen(len(x)) + len(x)
		case []byte:
			size += uvarintLen(len(x)) + len(x)
		case bool:
			size++
		case int32:
			size += 4
		case int64, float64:
			size += 8
		case time.Time:
			size += 12
		}
	}
	slices.Sort(names)
	b := make([]byte, 8, size)
	putI64(b, ts.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		switch x := props[name].(type) {
		case string:
			b = append(b, tString)
			b = binary.AppendUvarint(b, uint64(len(x)))
			b = append(b, x...)
		case []byte:
			b = append(b, tBinary)
			b = binary.AppendUvarint(b, uint64(len(x)))
			b = append(b, x...)
		case bool:
			if x {
				b = append(b, tBool, 1)
			} else {
				b = append(b, tBool, 0)
			}
		case int32:
			b = append(b, tInt32)
			b = binary.BigEndian.AppendUint32(b, uint32(x))
		case int64:
			b = append(b, tInt64)
			b = binary.BigEndian.AppendUint64(b, uint64(x))
		case float64:
			b = append(b, tFloat64)
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(x))
		case time.Time:
			b = append(b, tTime)
			b = binary.BigEndian.AppendUint64(b, uint64(x.Unix()))
			b = binary.BigEndian.AppendUint32(b, uint32(x.Nanosecond()))
		}
	}
	return b
}

// uvarintLen is the length of n as binary.AppendUvarint writes it.
func uvarintLen(n int) int {
	return (bits.Len64(uint64(n)|1) + 6) / 7
}

// recordTimestamp reads the write time of an encoded entity.
func recordTimestamp(rec []byte) int64 {
	if len(rec) < 8 {
		return 0
	}
	return i64(rec)
}

func decodeEntity(rec []byte) (time.Time, map[string]any, error) {
	if len(rec) < 8 {
		return time.Time{}, nil, errCorrupt
	}
	ts := fromNanos(i64(rec))
	b := rec[8:]
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return ts, nil, errCorrupt
	}
	b = b[k:]
	props := make(map[string]any, n)
	for i := uint64(0); i < n; i++ {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l+1 {
			return ts, nil, errCorrupt
		}
		name := string(b[k : k+int(l)])
		b = b[k+int(l):]
		typ := b[0]
		b = b[1:]
		need := func(m int) bool { return len(b) >= m }
		switch typ {
		case tString, tBinary:
			l, k := binary.Uvarint(b)
			if k <= 0 || uint64(len(b)-k) < l {
				return ts, nil, errCorrupt
			}
			v := b[k : k+int(l)]
			if typ == tString {
				props[name] = string(v)
			} else {
				props[name] = append([]byte{}, v...)
			}
			b = b[k+int(l):]
		case tBool:
			if !need(1) {
				return ts, nil, errCorrupt
			}
			props[name] = b[0] == 1
			b = b[1:]
		case tInt32:
			if !need(4) {
				return ts, nil, errCorrupt
			}
			props[name] = int32(binary.BigEndian.Uint32(b))
			b = b[4:]
		case tInt64:
			if !need(8) {
				return ts, nil, errCorrupt
			}
			props[name] = int64(binary.BigEndian.Uint64(b))
			b = b[8:]
		case tFloat64:
			if !need(8) {
				return ts, nil, errCorrupt
			}
			props[name] = math.Float64frombits(binary.BigEndian.Uint64(b))
			b = b[8:]
		case tTime:
			if !need(12) {
				return ts, nil, errCorrupt
			}
			sec := int64(binary.BigEndian.Uint64(b))
			nsec := int64(binary.BigEndian.Uint32(b[8:]))
			props[name] = time.Unix(sec, nsec).UTC()
			b = b[12:]
		default:
			return ts, nil, fmt.Errorf("%w: unknown property type %d", errCorrupt, typ)
		}
	}
	return ts, props, nil
}

// etagOf derives an entity's ETag from its write time, in Azure's format.
func etagOf(tsNanos int64) string {
	// Equivalent to Format("2006-01-02T15:04:05.000000000Z") on the UTC
	// time, written by hand: this runs for every entity written and read.
	t := time.Unix(0, tsNanos).UTC()
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	if year < 0 || year > 9999 {
		return `W/"datetime'` + t.Format("2006-01-02T15:04:05.000000000Z") + `'"`
	}
	b := make([]byte, 0, 48)
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
	b = append(b, `Z'"`...)
	return string(b)
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

// rawProp is one property of an encoded record: its name and its encoded
// type byte plus value, as stored.
type rawProp struct {
	name []byte
	enc  []byte // type byte and value
	size int    // the value's Azure size (storage.EntitySize's per-value part)
}

// nextProp reads the property at the start of b and returns it and the rest.
func nextProp(b []byte) (rawProp, []byte, error) {
	l, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < l+1 {
		return rawProp{}, nil, errCorrupt
	}
	p := rawProp{name: b[k : k+int(l)]}
	v := b[k+int(l):]
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
	default:
		return rawProp{}, nil, fmt.Errorf("%w: unknown property type %d", errCorrupt, typ)
	}
	if len(v) < n {
		return rawProp{}, nil, errCorrupt
	}
	p.enc = v[:n]
	return p, v[n:], nil
}

// recordProps returns the property count of an encoded record and the
// encoded properties that follow it.
func recordProps(rec []byte) (uint64, []byte, error) {
	if len(rec) < 8 {
		return 0, nil, errCorrupt
	}
	n, k := binary.Uvarint(rec[8:])
	if k <= 0 {
		return 0, nil, errCorrupt
	}
	return n, rec[8+k:], nil
}

// mergeRecords merges the encoded patch into the encoded record cur (Azure's
// Merge: the patch's properties replace or add to cur's) without decoding
// values, and stamps the result with ts. Both records keep their properties
// sorted by name (encodeEntity's order), so the result is byte for byte what
// encodeEntity would produce for the merged property map. It enforces the
// limits a merge can break — storage.MaxProperties and storage.MaxEntityBytes
// (keySize is the keys' part of storage.EntitySize) — with errors wrapping
// storage.ErrTooLarge.
func mergeRecords(cur, patch []byte, ts time.Time, keySize int) ([]byte, error) {
	nc, bc, err := recordProps(cur)
	if err != nil {
		return nil, err
	}
	np, bp, err := recordProps(patch)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 8, len(cur)+len(patch)+binary.MaxVarintLen64)
	putI64(out, ts.UnixNano())
	// The count is written once known; reserve its varint after the body.
	body := make([]byte, 0, len(bc)+len(bp))
	count, size := 0, keySize
	var pc, pp rawProp
	haveC, haveP := nc > 0, np > 0
	if haveC {
		if pc, bc, err = nextProp(bc); err != nil {
			return nil, err
		}
		nc--
	}
	if haveP {
		if pp, bp, err = nextProp(bp); err != nil {
			return nil, err
		}
		np--
	}
	emit := func(p rawProp) {
		body = binary.AppendUvarint(body, uint64(len(p.name)))
		body = append(body, p.name...)
		body = append(body, p.enc...)
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
			c = bytes.Compare(pc.name, pp.name)
		}
		if c <= 0 && haveC {
			if c < 0 {
				emit(pc)
			}
			if haveC = nc > 0; haveC {
				if pc, bc, err = nextProp(bc); err != nil {
					return nil, err
				}
				nc--
			}
		}
		if c >= 0 && haveP {
			emit(pp)
			if haveP = np > 0; haveP {
				if pp, bp, err = nextProp(bp); err != nil {
					return nil, err
				}
				np--
			}
		}
	}
	if count > storage.MaxProperties {
		return nil, fmt.Errorf("%w: merged entity has %d properties; the limit is %d", storage.ErrTooLarge, count, storage.MaxProperties)
	}
	if size > storage.MaxEntityBytes {
		return nil, fmt.Errorf("%w: merged entity is %d bytes; the limit is %d bytes (1 MiB)", storage.ErrTooLarge, size, storage.MaxEntityBytes)
	}
	out = binary.AppendUvarint(out, uint64(count))
	return append(out, body...), nil
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
