package cmdq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cmdq-dev/cmdq"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	s := openStore(t, "embedded")
	_, err := cmdq.New(s.st, cmdq.Config{Prefix: "Bad-Prefix", BatchSize: 99, MaxParamsBytes: -1, Observers: []cmdq.Observer{nil}})
	if !errors.Is(err, cmdq.ErrInvalidConfig) {
		t.Fatalf("New: %v", err)
	}
	for _, want := range []string{"Prefix", "BatchSize", "MaxParamsBytes", "Observers[0]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	// The prefix is validated in one place: one problem, not one per
	// component that uses it.
	if n := strings.Count(err.Error(), "Bad-Prefix"); n != 1 {
		t.Errorf("the prefix is reported %d times: %v", n, err)
	}
	if _, err := cmdq.New(nil, cmdq.Config{}); !errors.Is(err, cmdq.ErrInvalidConfig) {
		t.Fatalf("New(nil): %v", err)
	}
}
