package cmdq_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// BenchmarkIssueBatch issues 100 commands on the embedded store (fsync on)
// one by one and with IssueMany, and reports commits per batch (log syncs
// of the engine):
//
//	go test -run '^$' -bench IssueBatch -benchtime 20x .
func BenchmarkIssueBatch(b *testing.B) {
	const n = 100
	for _, mode := range []string{"one-by-one", "IssueMany"} {
		b.Run(mode, func(b *testing.B) {
			st, err := embedded.Open(filepath.Join(b.TempDir(), "cmdq-data"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			c, err := cmdq.New(st, cmdq.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Stop(context.Background())
			ctx := context.Background()
			if _, err := c.Issue(ctx, greet{Name: "warm"}); err != nil {
				b.Fatal(err)
			}
			cmds := make([]cmdq.Command, n)
			for i := range cmds {
				cmds[i] = greet{Name: "x"}
			}
			before := st.Stats().Commits
			b.ResetTimer()
			for range b.N {
				if mode == "IssueMany" {
					if _, err := c.IssueMany(ctx, cmds...); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for _, cmd := range cmds {
					if _, err := c.Issue(ctx, cmd); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(st.Stats().Commits-before)/float64(b.N), "commits/batch")
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "cmds/s")
		})
	}
}
