package layout

// Entity encoding: how the layout's rows store their values (docs/lifecycle.md,
// "Data layout"). Times are stored in UTC with millisecond precision, texts
// are cut to a number of UTF-16 units (Azure counts string sizes in them).

import (
	"strconv"
	"time"
	"unicode/utf16"

	"github.com/cmdq-dev/cmdq/storage"
)

// StrProp returns e's string property name ("" when missing).
func StrProp(e storage.Entity, name string) string {
	s, _ := e.Properties[name].(string)
	return s
}

// IntProp returns e's integer property name, whichever width the driver
// read it as (0 when missing).
func IntProp(e storage.Entity, name string) int64 {
	switch v := e.Properties[name].(type) {
	case int32:
		return int64(v)
	case int64:
		return v
	case float64:
		return int64(v)
	}
	return 0
}

// BoolProp returns e's boolean property name (false when missing).
func BoolProp(e storage.Entity, name string) bool {
	b, _ := e.Properties[name].(bool)
	return b
}

// TimeProp returns e's time property name in UTC (zero when missing).
func TimeProp(e storage.Entity, name string) time.Time {
	t, _ := e.Properties[name].(time.Time)
	return t.UTC()
}

// Truncate cuts s to at most max UTF-16 units (at a rune boundary), ending
// in a marker when cut.
func Truncate(s string, max int) string {
	if len(s) <= max || UTF16Units(s) <= max { // UTF-8 bytes ≥ UTF-16 units
		return s
	}
	limit := max - UTF16Units(TruncMark)
	units := 0
	for i, r := range s {
		n := utf16.RuneLen(r)
		if n < 0 {
			n = 1
		}
		if units+n > limit {
			return s[:i] + TruncMark
		}
		units += n
	}
	return s
}

// UTF16Units returns the length of s in UTF-16 code units.
func UTF16Units(s string) int {
	n := 0
	for _, r := range s {
		if k := utf16.RuneLen(r); k > 0 {
			n += k
		} else {
			n++
		}
	}
	return n
}

// Millis returns t as the layout stores times: UTC, millisecond precision.
func Millis(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// ParamsProp returns the name of the command row's i-th Params property:
// "Params", "Params1" … (see MaxParamsChunks).
func ParamsProp(i int) string {
	if i == 0 {
		return "Params"
	}
	return "Params" + strconv.Itoa(i)
}

// TruncMark ends a text that Truncate cut.
const TruncMark = "…[truncated]"
