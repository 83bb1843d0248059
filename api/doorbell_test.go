package api_test

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// The doorbells (wake-ups between processes) in GET /readyz and GET
// /v1/processors. Every answer is checked against api/openapi.json.

// TestReadyzNamesDoorbells: on Azure (Azurite), where processes wake each
// other, GET /readyz's detail names the address the server's processor
// listens on for wake-ups (as GET /v1/processors lists it); and a server
// without a processor, whose wake-ups a processor elsewhere does not ack
// (its advertised address reaches nothing), names that address as
// unreachable in its /readyz detail, and GET /v1/processors marks that
// processor wakeUnreachable.
func TestReadyzNamesDoorbells(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	env := testenv.Open(t, "azure")
	// The store itself: it holds the wake-ups' secret.
	worker := apitest.Start(t, apitest.Options{Store: env.Store.Store, Prefix: env.Prefix, Setup: func(c *cmdq.Client) error { return registerWaitJob(c, nil) }})
	c := specClient{t, spec, worker.URL}
	var h struct {
		Detail struct {
			Wake        string   `json:"wake"`
			Unreachable []string `json:"unreachable"`
		} `json:"detail"`
	}
	var ps client.ProcessorsResponse
	// The processor's run opens its doorbell, then writes its heartbeat.
	waitFor(t, 30*time.Second, "/readyz names the doorbell and the processors' list has it", func() bool {
		h.Detail.Wake, ps.Processors = "", nil
		if err := json.Unmarshal(c.expect(http.StatusOK, http.MethodGet, "/readyz", "", "").body, &h); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(c.expect(http.StatusOK, http.MethodGet, "/v1/processors", "", "").body, &ps); err != nil {
			t.Fatal(err)
		}
		return h.Detail.Wake != "" && len(ps.Processors) > 0
	})
	if _, _, err := net.SplitHostPort(h.Detail.Wake); err != nil {
		t.Fatalf("/readyz detail wake %q: want the doorbell's host:port (%v)", h.Detail.Wake, err)
	}
	if len(ps.Processors) != 1 || !ps.Processors[0].Local || ps.Processors[0].Wake != h.Detail.Wake || ps.Processors[0].WakeUnreachable {
		t.Fatalf("processors %+v, want this server's, with the doorbell %s of /readyz", ps.Processors, h.Detail.Wake)
	}

	other := testenv.Open(t, "azure")
	front := apitest.Start(t, apitest.Options{Store: other.Store.Store, Prefix: other.Prefix})
	fc := specClient{t, spec, front.URL}
	h.Detail.Wake, h.Detail.Unreachable = "", nil
	if err := json.Unmarshal(fc.expect(http.StatusOK, http.MethodGet, "/readyz", "", "").body, &h); err != nil {
		t.Fatal(err)
	}
	if h.Detail.Wake != "" || len(h.Detail.Unreachable) != 0 {
		t.Fatalf("/readyz of a server without a processor that rang nothing: %+v, want no doorbell detail", h.Detail)
	}
	dead := apitest.DeadDoorbell(t)
	apitest.StartPeer(t, other.Store.Store, other.Prefix, "behind-a-firewall", dead)
	front.RingUntilUnreachable(t, dead)
	h.Detail.Wake, h.Detail.Unreachable = "", nil
	if err := json.Unmarshal(fc.expect(http.StatusOK, http.MethodGet, "/readyz", "", "").body, &h); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.Detail.Unreachable, []string{dead}) {
		t.Fatalf("/readyz detail unreachable %q, want [%s]", h.Detail.Unreachable, dead)
	}
	ps = client.ProcessorsResponse{}
	if err := json.Unmarshal(fc.expect(http.StatusOK, http.MethodGet, "/v1/processors", "", "").body, &ps); err != nil {
		t.Fatal(err)
	}
	if len(ps.Processors) != 1 || ps.Processors[0].Name != "behind-a-firewall" || ps.Processors[0].Wake != dead || !ps.Processors[0].WakeUnreachable {
		t.Fatalf("processors %+v, want behind-a-firewall at %s, wakeUnreachable", ps.Processors, dead)
	}
}
