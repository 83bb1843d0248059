package model

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// typeRE is the rule validType implements.
var typeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,127}$`)

// FuzzValidType: validType agrees with the regular expression it replaces
// on every input (the seeds run in every `go test`).
func FuzzValidType(f *testing.F) {
	for _, s := range []string{
		"", "a", "Z", "0", ".", "_a", "-a", "billing.ChargeCard", "demo.sleep", "a-b_c.d9",
		"a b", "a/b", "é", "aé", "a\n", "a\x00", "A" + strings.Repeat("x", 127), "A" + strings.Repeat("x", 128),
		"a:b", "a+b", "a@b", "a[b", "a`b", "a{b", "a~b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validType(s), typeRE.MatchString(s); got != want {
			t.Fatalf("validType(%q) = %v, the expression says %v", s, got, want)
		}
		err := ValidateType(s)
		if (err == nil) != typeRE.MatchString(s) || (err != nil && !errors.Is(err, ErrInvalidType)) {
			t.Fatalf("ValidateType(%q) = %v", s, err)
		}
	})
}
