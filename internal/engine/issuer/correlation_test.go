package issuer_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/issuer"
	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// TestReissueComparesCorrelationID: the same id with the same type and
// params but another correlation ID (or none) is a different request, so
// ErrIDConflict, not silently the old command.
func TestReissueComparesCorrelationID(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "cmdq-data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	is, err := issuer.NewIssuer(st, issuer.IssuerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := uuid.NewString()
	raw := model.Raw{ID: id, Type: "billing.ChargeCard", CorrelationID: "order-1"}
	if _, err := is.IssueRaw(ctx, raw); err != nil {
		t.Fatal(err)
	}
	if res, err := is.IssueRaw(ctx, raw); err != nil || !res.Existing {
		t.Fatalf("same request again: %+v %v, want Existing", res, err)
	}
	for _, corr := range []string{"order-2", ""} {
		other := raw
		other.CorrelationID = corr
		if _, err := is.IssueRaw(ctx, other); !errors.Is(err, model.ErrIDConflict) {
			t.Errorf("correlation ID %q under an id issued with %q: %v, want ErrIDConflict", corr, raw.CorrelationID, err)
		}
	}
}
