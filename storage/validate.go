package storage

import (
	"fmt"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// ValidateQueueName checks Azure's queue naming rules: 3–63 characters,
// lowercase letters, digits and hyphens, starting and ending with a letter or
// digit, no two hyphens in a row. The error wraps ErrInvalidName.
func ValidateQueueName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: queue name %q %s (queue names are 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit)", ErrInvalidName, name, why)
	}
	if len(name) < 3 || len(name) > 63 {
		return bad(fmt.Sprintf("has %d characters", len(name)))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 || i == len(name)-1 {
				return bad("starts or ends with a hyphen")
			}
			if name[i-1] == '-' {
				return bad("has consecutive hyphens")
			}
		default:
			return bad(fmt.Sprintf("contains %q", c))
		}
	}
	return nil
}

// ValidateTableName checks Azure's table naming rules: 3–63 ASCII letters and
// digits, starting with a letter, and not the reserved name "tables". The
// error wraps ErrInvalidName.
func ValidateTableName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: table name %q %s (table names are 3-63 letters and digits, starting with a letter)", ErrInvalidName, name, why)
	}
	if len(name) < 3 || len(name) > 63 {
		return bad(fmt.Sprintf("has %d characters", len(name)))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9':
			if i == 0 {
				return bad("starts with a digit")
			}
		default:
			return bad(fmt.Sprintf("contains %q", c))
		}
	}
	if len(name) == 6 && (name == "tables" || equalFoldASCII(name, "tables")) {
		return bad("is reserved")
	}
	return nil
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x >= 'A' && x <= 'Z' {
			x += 'a' - 'A'
		}
		if y >= 'A' && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// ValidateKey checks a PartitionKey or RowKey (which names it, for the error):
// valid UTF-8, at most MaxKeyBytes in UTF-16 (as Azure counts: 512 code
// units), and none of / \ # ? or control characters
// (U+0000–U+001F, U+007F–U+009F). An empty key is allowed, as in Azure. The
// error wraps ErrInvalidKey or ErrTooLarge.
func ValidateKey(which, key string) error {
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidKey, which, key)
	}
	if n := 2 * utf16Len(key); n > MaxKeyBytes {
		return fmt.Errorf("%w: %s is %d bytes in UTF-16 (%d characters); the limit is %d bytes (1 KiB, 512 UTF-16 code units)", ErrTooLarge, which, n, utf16Len(key), MaxKeyBytes)
	}
	for _, r := range key {
		switch {
		case r == '/', r == '\\', r == '#', r == '?':
			return fmt.Errorf("%w: %s %q contains %q; keys may not contain / \\ # ? or control characters", ErrInvalidKey, which, key, r)
		case r <= 0x1f, r >= 0x7f && r <= 0x9f:
			return fmt.Errorf("%w: %s %q contains control character U+%04X; keys may not contain / \\ # ? or control characters", ErrInvalidKey, which, key, r)
		}
	}
	return nil
}

// reservedProp reports whether name is a system property's (a switch, not
// a map: this runs for every property written).
func reservedProp(name string) bool {
	switch name {
	case "PartitionKey", "RowKey", "Timestamp", "ETag", "odata.etag":
		return true
	}
	return false
}

// EntitySize returns the size Azure charges an entity against MaxEntityBytes:
// 4 bytes, plus keys in UTF-16, plus for each property 8 bytes, its name in
// UTF-16 and its value (strings in UTF-16 with 4 bytes of length, binaries
// with 4 bytes of length, 8 for int64/float64/time, 4 for int32, 1 for bool).
func EntitySize(e Entity) int {
	n := 4 + 2*utf16Len(e.PartitionKey) + 2*utf16Len(e.RowKey)
	if e.Props != nil {
		for _, p := range e.Props {
			n += 8 + 2*utf16Len(p.Name) + propSize(p)
		}
		return n
	}
	for name, v := range e.Properties {
		n += 8 + 2*utf16Len(name) + valueSize(v)
	}
	return n
}

// propSize is valueSize for a Prop.
func propSize(p Prop) int {
	switch p.kind {
	case KindString:
		return 4 + 2*utf16Len(p.str)
	case KindBinary:
		return 4 + len(p.str)
	case KindBool:
		return 1
	case KindInt32:
		return 4
	case KindInt64, KindFloat64, KindTime:
		return 8
	}
	return 0
}

// valueKind is the kind of a Properties value (0 for a type Entity does
// not allow).
func valueKind(v any) PropKind {
	switch v.(type) {
	case string:
		return KindString
	case []byte:
		return KindBinary
	case bool:
		return KindBool
	case int32:
		return KindInt32
	case int64:
		return KindInt64
	case float64:
		return KindFloat64
	case time.Time:
		return KindTime
	}
	return 0
}

func valueSize(v any) int {
	switch x := v.(type) {
	case string:
		return 4 + 2*utf16Len(x)
	case []byte:
		return 4 + len(x)
	case bool:
		return 1
	case int32:
		return 4
	case int64, float64, time.Time:
		return 8
	}
	return 0
}

func utf16Len(s string) int {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return len(s)
	}
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// ValidateEntity checks keys, property names, types and sizes against Azure
// Table's rules before any I/O. Errors wrap ErrInvalidKey, ErrTooLarge or
// ErrInvalidArgument and name the limit.
func ValidateEntity(e Entity) error {
	_, err := checkEntity(e)
	return err
}

// checkEntity is ValidateEntity, also returning the entity's size (as
// EntitySize counts it).
func checkEntity(e Entity) (int, error) {
	if err := ValidateKey("PartitionKey", e.PartitionKey); err != nil {
		return 0, err
	}
	if err := ValidateKey("RowKey", e.RowKey); err != nil {
		return 0, err
	}
	if e.Props != nil && e.Properties != nil {
		return 0, fmt.Errorf("%w: entity (%q, %q) has both Props and Properties; give its properties in one of them", ErrInvalidArgument, e.PartitionKey, e.RowKey)
	}
	if n := e.PropCount(); n > MaxProperties {
		return 0, fmt.Errorf("%w: entity (%q, %q) has %d properties; the limit is %d", ErrTooLarge, e.PartitionKey, e.RowKey, n, MaxProperties)
	}
	// One pass: each name and value is checked and sized once (the size
	// as EntitySize counts it).
	size := 4 + 2*utf16Len(e.PartitionKey) + 2*utf16Len(e.RowKey)
	if e.Props != nil {
		for i, p := range e.Props {
			if err := checkPropName(p.Name); err != nil {
				return 0, err
			}
			if p.kind == 0 {
				return 0, fmt.Errorf("%w: property %q is a zero Prop; build it with StringProp, Int64Prop, ... or PropOf", ErrInvalidArgument, p.Name)
			}
			if err := checkSize(p.Name, p.kind, propSize(p)); err != nil {
				return 0, err
			}
			if dupProp(e.Props, i) {
				return 0, fmt.Errorf("%w: entity (%q, %q) has property %q twice in Props", ErrInvalidArgument, e.PartitionKey, e.RowKey, p.Name)
			}
			size += 8 + 2*len(p.Name) + propSize(p) // a valid name is ASCII
		}
	}
	for name, v := range e.Properties {
		if err := checkPropName(name); err != nil {
			return 0, err
		}
		kind := valueKind(v)
		if kind == 0 {
			return 0, fmt.Errorf("%w: property %q has type %T; use string, []byte, bool, int32, int64, float64 or time.Time", ErrInvalidArgument, name, v)
		}
		vs := valueSize(v)
		if err := checkSize(name, kind, vs); err != nil {
			return 0, err
		}
		size += 8 + 2*len(name) + vs // a valid name is ASCII
	}
	if size > MaxEntityBytes {
		return 0, fmt.Errorf("%w: entity (%q, %q) is %d bytes; the limit is %d bytes (1 MiB)", ErrTooLarge, e.PartitionKey, e.RowKey, size, MaxEntityBytes)
	}
	return size, nil
}

// checkPropName checks a property's name.
func checkPropName(name string) error {
	if name == "" || len(name) > MaxPropertyNameBytes {
		return fmt.Errorf("%w: property name %q must be 1-%d characters", ErrInvalidArgument, name, MaxPropertyNameBytes)
	}
	if reservedProp(name) {
		return fmt.Errorf("%w: property name %q is reserved", ErrInvalidArgument, name)
	}
	if !validPropertyName(name) {
		return fmt.Errorf("%w: property name %q must start with a letter or underscore and contain only letters, digits and underscores", ErrInvalidArgument, name)
	}
	return nil
}

// checkSize checks the size of a string or binary value (size as
// valueSize counts it: 4 bytes of length and the value).
func checkSize(name string, kind PropKind, size int) error {
	switch kind {
	case KindString:
		if sz := size - 4; sz > MaxPropertyBytes {
			return fmt.Errorf("%w: string property %q is %d bytes in UTF-16; the limit is %d bytes (64 KiB, 32768 UTF-16 code units)", ErrTooLarge, name, sz, MaxPropertyBytes)
		}
	case KindBinary:
		if sz := size - 4; sz > MaxPropertyBytes {
			return fmt.Errorf("%w: binary property %q is %d bytes; the limit is %d bytes (64 KiB)", ErrTooLarge, name, sz, MaxPropertyBytes)
		}
	}
	return nil
}

// dupProp reports whether ps[i]'s name appears before i in ps.
func dupProp(ps []Prop, i int) bool {
	for _, q := range ps[:i] {
		if q.Name == ps[i].Name {
			return true
		}
	}
	return false
}

func validPropertyName(name string) bool {
	for i, r := range name {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// ValidateBatch checks a table batch before any I/O: 1..MaxBatchOps
// operations, all in partitionKey, no row key twice, every entity valid, and
// the total under MaxBatchBytes. Errors wrap ErrInvalidArgument, ErrTooLarge,
// or are *BatchError for a single bad operation.
func ValidateBatch(partitionKey string, ops []BatchOp) error {
	if len(ops) == 0 || len(ops) > MaxBatchOps {
		return fmt.Errorf("%w: a batch has 1-%d operations, got %d", ErrInvalidArgument, MaxBatchOps, len(ops))
	}
	var seen map[string]struct{} // only for large batches: small ones compare
	if len(ops) > 8 {
		seen = make(map[string]struct{}, len(ops))
	}
	total := 0
	for i, op := range ops {
		if op.Entity.PartitionKey != partitionKey {
			return &BatchError{Index: i, Err: fmt.Errorf("%w: operation's PartitionKey %q differs from the batch's %q; a batch covers one partition", ErrInvalidArgument, op.Entity.PartitionKey, partitionKey)}
		}
		dup := false
		if seen != nil {
			_, dup = seen[op.Entity.RowKey]
			seen[op.Entity.RowKey] = struct{}{}
		} else {
			for _, prev := range ops[:i] {
				dup = dup || prev.Entity.RowKey == op.Entity.RowKey
			}
		}
		if dup {
			return &BatchError{Index: i, Err: fmt.Errorf("%w: RowKey %q appears twice in one batch", ErrInvalidArgument, op.Entity.RowKey)}
		}
		if op.Kind < OpInsert || op.Kind > OpDelete {
			return &BatchError{Index: i, Err: fmt.Errorf("%w: unknown batch operation kind %d", ErrInvalidArgument, op.Kind)}
		}
		var err error
		size := 0
		if op.Kind == OpDelete {
			if err = ValidateKey("PartitionKey", op.Entity.PartitionKey); err == nil {
				err = ValidateKey("RowKey", op.Entity.RowKey)
			}
			size = EntitySize(op.Entity)
		} else {
			size, err = checkEntity(op.Entity)
		}
		if err != nil {
			return &BatchError{Index: i, Err: err}
		}
		total += size
	}
	if total > MaxBatchBytes {
		return fmt.Errorf("%w: batch payload is about %d bytes; the limit is %d bytes (4 MiB)", ErrTooLarge, total, MaxBatchBytes)
	}
	return nil
}

// ValidateEnqueue checks Enqueue's arguments before any I/O.
func ValidateEnqueue(text string, visibilityDelay, ttl time.Duration) error {
	if len(text) > MaxMessageBytes {
		return fmt.Errorf("%w: message is %d bytes; the limit is %d bytes (64 KiB)", ErrTooLarge, len(text), MaxMessageBytes)
	}
	if !utf8.ValidString(text) {
		return fmt.Errorf("%w: message text is not valid UTF-8; encode binary data (for example base64)", ErrInvalidArgument)
	}
	if visibilityDelay < 0 || visibilityDelay > MaxVisibility {
		return fmt.Errorf("%w: visibility delay %s is outside 0..%s", ErrInvalidArgument, visibilityDelay, MaxVisibility)
	}
	if ttl < 0 && ttl != NoExpiry {
		return fmt.Errorf("%w: ttl %s is negative; use 0 for the default (7 days) or storage.NoExpiry", ErrInvalidArgument, ttl)
	}
	eff := ttl
	if eff == 0 {
		eff = DefaultTTL
	}
	if eff > 0 && visibilityDelay >= eff {
		return fmt.Errorf("%w: visibility delay %s must be shorter than the ttl %s", ErrInvalidArgument, visibilityDelay, eff)
	}
	return nil
}

// ValidateDequeue checks Dequeue's and Peek's max and Dequeue's visibility.
func ValidateDequeue(max int, visibility time.Duration) error {
	if max < 1 || max > MaxDequeue {
		return fmt.Errorf("%w: max messages %d is outside 1..%d", ErrInvalidArgument, max, MaxDequeue)
	}
	return ValidateVisibility(visibility)
}

// ValidateVisibility checks a visibility timeout: 0..MaxVisibility.
func ValidateVisibility(visibility time.Duration) error {
	if visibility < 0 || visibility > MaxVisibility {
		return fmt.Errorf("%w: visibility timeout %s is outside 0..%s", ErrInvalidArgument, visibility, MaxVisibility)
	}
	return nil
}
