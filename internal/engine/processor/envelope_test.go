package processor_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/internal/engine/layout"
	"github.com/cmdq-dev/cmdq/internal/engine/processor"
)

// TestEnvelope: the queue message is {"id","type"}; the processor takes only
// one with a canonical ID and a valid type.
func TestEnvelope(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	e := layout.Envelope{ID: id, Type: "billing.ChargeCard"}
	text := e.Marshal()
	if text != `{"id":"`+id+`","type":"billing.ChargeCard"}` {
		t.Fatalf("envelope text %s", text)
	}
	got, err := processor.ParseMessage(text)
	if err != nil || got != e {
		t.Fatalf("ParseEnvelope: %+v %v", got, err)
	}
	for _, bad := range []string{"", "{", "[]", `{"id":"` + id + `"}`, `{"id":"x","type":"a"}`, `{"id":"` + id + `","type":"a","extra":1}`,
		`{"id":"` + id + `","type":"a"} {}`, `{"id":"` + id + `","type":"9"}`} {
		if _, err := processor.ParseMessage(bad); !errors.Is(err, layout.ErrMalformedMessage) {
			t.Errorf("ParseEnvelope(%q): %v", bad, err)
		}
	}
}
