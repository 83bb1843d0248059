package embedded

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// Format 1 of the entity record (cmdq before the name dictionary): every
// record carries its property names.
//
//	timestamp unix nanos (8) | property count (uvarint) |
//	per property: name len (uvarint) name type (1) value
//
// Values as in format 2. Open migrates a format-1 store to format 2
// (migrate.go); decodeEntityV1 reads its records, and encodeEntityV1 is
// kept to build such stores in tests.

// encodeEntityV1 encodes props in format 1, names sorted.
func encodeEntityV1(ts time.Time, props map[string]any) []byte {
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

// decodeEntityV1 decodes a format-1 record.
func decodeEntityV1(rec []byte) (time.Time, map[string]any, error) {
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
