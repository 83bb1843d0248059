package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cmdq-dev/cmdq"
)

// parseRates parses the --rate values (TYPE=N/DURATION).
func parseRates(vals []string) (map[string]cmdq.Rate, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]cmdq.Rate{}
	for _, v := range vals {
		t, rest, ok1 := strings.Cut(v, "=")
		n, per, ok2 := strings.Cut(rest, "/")
		t = strings.TrimSpace(t)
		limit, err1 := strconv.Atoi(strings.TrimSpace(n))
		d, err2 := time.ParseDuration(strings.TrimSpace(per))
		if !ok1 || !ok2 || t == "" || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("--rate %q: give TYPE=N/DURATION, such as demo.sleep=10/1s (N starts in any window of DURATION)", v)
		}
		if err := cmdq.ValidateType(t); err != nil {
			return nil, fmt.Errorf("--rate %q: %w", v, err)
		}
		if limit < 1 {
			return nil, fmt.Errorf("--rate %q: N must be at least 1 start per window (leave the type out for its own rate)", v)
		}
		if d < cmdq.MinRatePer || d > cmdq.MaxRatePer {
			return nil, fmt.Errorf("--rate %q: DURATION must be 1ms to 8784h (366 days), such as 1s", v)
		}
		if _, dup := out[t]; dup {
			return nil, fmt.Errorf("--rate: %s given twice", t)
		}
		out[t] = cmdq.Rate{Limit: limit, Per: d}
	}
	return out, nil
}
