package api_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
	"github.com/cmdq-dev/cmdq/internal/testenv"
)

// v7At returns a UUIDv7 that carries t (its 48-bit millisecond time; the
// rest fixed, which is fine for a test).
func v7At(t time.Time) string {
	var b [16]byte
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(b[0:6], ms[2:])
	b[6], b[7] = 0x70, 0x01 // version 7
	b[8] = 0x80             // variant 10
	b[15] = 0x42
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// probeFail is a command type whose handler fails permanently.
type probeFail struct{}

func (probeFail) CommandType() string { return "probe.fail" }

// TestProbeIssueRefusals (issue 32, findings 3-6): on both stores, what
// the probe found accepted is a 400 naming the field, saying what to send,
// and nothing is stored.
//   - an id that is a UUIDv7 dated 1970, 2022 or 2527 (outside the issue
//     window although outside the days a table can hold: the Go API gives
//     ErrInvalidID and ErrIDOutsideWindow too);
//   - a \ud800 escape (a lone surrogate) anywhere, as bytes that are not
//     UTF-8 are: it would be stored as U+FFFD;
//   - "delay":"", "runAt":"", "uniqueKey":"", "uniqueWindow":"" (not read
//     as absent; "delay":"" with runAt is both given);
//   - a runAt with a +24:00 offset or a comma before the fraction (not
//     RFC 3339).
func TestProbeIssueRefusals(t *testing.T) {
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		s := apitest.Start(t, apitest.Options{Store: env.Store, Prefix: env.Prefix})
		ctx := context.Background()
		now := time.Now().UTC()
		for _, when := range []time.Time{time.UnixMilli(1000), time.Date(2022, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(2527, 1, 1, 0, 0, 0, 0, time.UTC), now.AddDate(0, 0, -3), now.AddDate(0, 0, 2)} {
			id := v7At(when)
			r := post(t, s.URL+"/v1/commands", `{"type":"A","id":"`+id+`"}`)
			if r.code != http.StatusBadRequest {
				t.Errorf("id dated %s: %d %s, want 400", when.Format(time.DateOnly), r.code, r.body)
				continue
			}
			p := problem(t, r, http.StatusBadRequest, client.ProblemInvalidRequest)
			from := now.AddDate(0, 0, -cmdq.IssueWindowPastDays).Format(time.DateOnly)
			if len(p.Errors) != 1 || p.Errors[0].Pointer != "#/id" || !strings.Contains(p.Detail, "issue window") || !strings.Contains(p.Detail, from) {
				t.Errorf("id dated %s: %+v, want a 400 on #/id naming the window (from %s)", when.Format(time.DateOnly), p, from)
			}
			_, err := s.Client.IssueRaw(ctx, cmdq.Raw{ID: id, Type: "A"})
			if !errors.Is(err, cmdq.ErrInvalidID) || !errors.Is(err, cmdq.ErrIDOutsideWindow) {
				t.Errorf("Go API, id dated %s: %v, want ErrInvalidID and ErrIDOutsideWindow", when.Format(time.DateOnly), err)
			}
			if _, err := s.Client.Get(ctx, id); !errors.Is(err, cmdq.ErrNotFound) {
				t.Errorf("id dated %s: stored (%v)", when.Format(time.DateOnly), err)
			}
		}
		for _, c := range []struct{ name, body, pointer, want string }{
			{"lone high surrogate in params", `{"type":"A","params":{"x":"a\ud800b"}}`, "#/params", "surrogate"},
			{"lone low surrogate in params", `{"type":"A","params":{"x":"\udc00"}}`, "#/params", "surrogate"},
			{"high surrogate at the end", `{"type":"A","params":{"x":"\ud800"}}`, "#/params", "surrogate"},
			{"lone surrogate in a key", `{"type":"A","params":{"\ud800":1}}`, "#/params", "surrogate"},
			{"lone surrogate in correlationId", `{"type":"A","correlationId":"\ud83d"}`, "#/correlationId", "surrogate"},
			{"empty delay", `{"type":"A","delay":""}`, "#/delay", "leave the field out"},
			{"empty runAt", `{"type":"A","runAt":""}`, "#/runAt", "leave the field out"},
			{"empty uniqueKey", `{"type":"A","uniqueKey":"","uniqueWindow":"1h"}`, "#/uniqueKey", "leave the field out"},
			{"empty uniqueWindow", `{"type":"A","uniqueWindow":""}`, "#/uniqueWindow", "leave the field out"},
			{"runAt with offset +24:00", `{"type":"A","runAt":"2027-01-01T09:00:00+24:00"}`, "#/runAt", "RFC 3339"},
			{"runAt with a comma", `{"type":"A","runAt":"2027-01-01T09:00:00,5Z"}`, "#/runAt", "RFC 3339"},
			{"runAt with offset minutes 60", `{"type":"A","runAt":"2027-01-01T09:00:00+05:60"}`, "#/runAt", "RFC 3339"},
		} {
			r := post(t, s.URL+"/v1/commands", c.body)
			if r.code != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", c.name, r.code, r.body)
				continue
			}
			p := problem(t, r, http.StatusBadRequest, client.ProblemInvalidRequest)
			found := false
			for _, e := range p.Errors {
				found = found || e.Pointer == c.pointer && (strings.Contains(e.Detail, c.want) || strings.Contains(p.Detail, c.want))
			}
			if !found {
				t.Errorf("%s: %+v, want %s with %q", c.name, p, c.pointer, c.want)
			}
		}
		// An empty delay with runAt is both given.
		if r := post(t, s.URL+"/v1/commands", `{"type":"A","runAt":"2027-01-01T09:00:00Z","delay":""}`); r.code != http.StatusBadRequest || !strings.Contains(string(r.body), "both given") {
			t.Errorf("runAt with an empty delay: %d %s, want 400 saying both given", r.code, r.body)
		}
		if n := s.QueueCount(t, ""); n != 0 && !t.Failed() {
			t.Fatalf("%d messages queued by refused requests", n)
		}
		// What is fine stays fine: a surrogate pair, strict RFC 3339 with
		// a fraction and an offset, null for absent.
		decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A","params":{"x":"\ud83d\ude00 \\ud800"}}`), http.StatusAccepted)
		decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A","runAt":"2027-01-01T09:00:00.250+23:59"}`), http.StatusAccepted)
		decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A","runAt":null,"delay":"1s"}`), http.StatusAccepted)
		decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A","id":"`+v7At(now)+`"}`), http.StatusAccepted)
	})
}

// TestProbePreferWaitCapped (issue 32, finding 8): a Prefer wait past what
// a number or a time.Duration holds is cut to MaxWait like any longer
// one (Preference-Applied says so); it used to wrap around to 0 (answered
// at once) or be ignored. A ?wait= past it is a 400, not a wrapped wait.
func TestProbePreferWaitCapped(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	id := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"A"}`), http.StatusAccepted).ID
	url := s.URL + "/v1/commands/" + id
	for _, v := range []string{"9223372036854775807", "99999999999999999999", "9223372037", "31", "600"} {
		// A tag that does not match: the status differs, so the answer
		// comes at once whatever the wait.
		r := request(t, http.MethodGet, url, "", "", "If-None-Match", `"stale"`, "Prefer", "wait="+v)
		if r.code != http.StatusOK || r.header.Get("Preference-Applied") != "wait=30" {
			t.Errorf("Prefer: wait=%s: %d Preference-Applied %q, want 200 and wait=30 (MaxWait)", v, r.code, r.header.Get("Preference-Applied"))
		}
	}
	for _, v := range []string{"9223372036854775807", "9223372037", "18446744074"} {
		problem(t, request(t, http.MethodGet, url+"?wait="+v, "", ""), http.StatusBadRequest, client.ProblemInvalidRequest)
	}
}

// TestProbeFinalStatusHasNoRunAt (issue 32, finding 7, over HTTP): the
// status of a poisoned command carries no runAt on both stores.
func TestProbeFinalStatusHasNoRunAt(t *testing.T) {
	testenv.Each(t, func(t *testing.T, env testenv.Env) {
		s := apitest.Start(t, apitest.Options{Store: env.Store, Prefix: env.Prefix, Setup: func(c *cmdq.Client) error {
			return cmdq.Register(c, func(context.Context, probeFail, *cmdq.Attempt) error {
				return cmdq.Permanent(errors.New("not configured"))
			})
		}})
		id := decode[client.IssueResponse](t, post(t, s.URL+"/v1/commands", `{"type":"probe.fail"}`), http.StatusAccepted).ID
		if st, err := s.Client.Wait(context.Background(), id); err != nil || st.State != cmdq.StatePoisoned {
			t.Fatalf("wait: %+v %v", st, err)
		}
		r := send(t, http.MethodGet, s.URL+"/v1/commands/"+id, "", "", "")
		var st map[string]any
		if err := json.Unmarshal(r.body, &st); err != nil || st["status"] != "poisoned" {
			t.Fatalf("status %s: %v", r.body, err)
		}
		if v, ok := st["runAt"]; ok {
			t.Fatalf("a poisoned command's status has runAt %v: %s", v, r.body)
		}
	})
}
