package api_test

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/cmdq-dev/cmdq/api"
	"github.com/cmdq-dev/cmdq/client"
	"github.com/cmdq-dev/cmdq/internal/apitest"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	got, err := api.ParseTokens(" issuer-token-0123456789:issuer , ops-token-0123456789:operator+issuer+operator,")
	if err == nil {
		t.Fatalf("trailing comma accepted: %v", got)
	}
	got, err = api.ParseTokens(" issuer-token-0123456789:issuer , ops-token-0123456789:operator+issuer+operator")
	if err != nil {
		t.Fatal(err)
	}
	want := api.Tokens{"issuer-token-0123456789": {api.RoleIssuer}, "ops-token-0123456789": {api.RoleOperator, api.RoleIssuer}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := api.ParseTokens("  "); err != nil || got != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
	bad := []struct{ in, mention string }{
		{"short:issuer", "at least 16"},
		{"issuer-token-0123456789", "no ':role'"},
		{"issuer-token-0123456789:admin", `unknown role "admin"`},
		{"issuer-token-0123456789:", `unknown role ""`},
		{"issuer-token-0123456789:issuer,issuer-token-0123456789:reader", "repeats"},
		{"issuer token 0123456789:issuer", "contains"},
		{"a,,b", "empty"},
	}
	for _, c := range bad {
		_, err := api.ParseTokens(c.in)
		if err == nil || !errors.Is(err, api.ErrInvalidTokens) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("ParseTokens(%q) = %v, want error mentioning %q", c.in, err, c.mention)
		}
		if err != nil && strings.Contains(c.in, "0123456789") && strings.Contains(err.Error(), "0123456789") {
			t.Errorf("ParseTokens(%q) error repeats the token: %v", c.in, err)
		}
	}
	// Every problem is reported at once.
	_, err = api.ParseTokens("short:issuer,issuer-token-0123456789:admin")
	if err == nil || !strings.Contains(err.Error(), "at least 16") || !strings.Contains(err.Error(), "admin") {
		t.Fatalf("both problems not reported: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := api.New(api.Config{MaxBodyBytes: -1, BasePath: "cmdq/", Tokens: api.Tokens{"x": nil}})
	if !errors.Is(err, api.ErrInvalidConfig) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"Client is required", "MaxBodyBytes", "BasePath", "no roles", "at least 16"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// TestAuthMatrix checks every route with no token, a wrong token, a
// malformed header and each role's token. (It makes many failed
// authentications from one address; the limiter is off here and tested in
// TestFailedAuthLimited.)
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Tokens: apitest.Tokens(), AuthFailureBurst: -1})
	id := uuid.NewString()
	routes := []struct {
		method, path, body string
		need               api.Role // "" = no auth
	}{
		{http.MethodPost, "/v1/commands", `{"type":"A"}`, api.RoleIssuer},
		{http.MethodGet, "/v1/commands/" + id, "", api.RoleReader},
		{http.MethodGet, "/v1/commands/" + id + "/events", "", api.RoleReader},
		{http.MethodGet, "/v1/poison", "", api.RoleOperator},
		{http.MethodGet, "/v1/poison/" + id, "", api.RoleOperator},
		{http.MethodPost, "/v1/poison/" + id + "/requeue", "", api.RoleOperator},
		{http.MethodDelete, "/v1/poison/" + id, "", api.RoleOperator},
		{http.MethodGet, "/metrics", "", api.RoleReader},
		{http.MethodGet, "/healthz", "", ""},
		{http.MethodGet, "/readyz", "", ""},
	}
	tokens := map[string]api.Role{
		apitest.IssuerToken:   api.RoleIssuer,
		apitest.ReaderToken:   api.RoleReader,
		apitest.OperatorToken: api.RoleOperator,
	}
	allowed := func(has, need api.Role) bool {
		return has == need || (has == api.RoleOperator && need == api.RoleReader)
	}
	for _, rt := range routes {
		name := rt.method + " " + rt.path
		sendAuth := func(header string) resp {
			req, err := http.NewRequest(rt.method, s.URL+rt.path, strings.NewReader(rt.body))
			if err != nil {
				t.Fatal(err)
			}
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			var b strings.Builder
			buf := make([]byte, 4096)
			for {
				n, err := r.Body.Read(buf)
				b.Write(buf[:n])
				if err != nil {
					break
				}
			}
			return resp{code: r.StatusCode, header: r.Header, body: []byte(b.String())}
		}
		for _, h := range []string{"", "Bearer wrong-token-0123456789", "Basic dXNlcjpwYXNz", "Bearer", "Bearer " + apitest.IssuerToken + "x"} {
			r := sendAuth(h)
			if rt.need == "" {
				if r.code != http.StatusOK {
					t.Errorf("%s with %q: %d, want 200 (no auth)", name, h, r.code)
				}
				continue
			}
			problem(t, r, http.StatusUnauthorized, client.ProblemUnauthorized)
			if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("%s with %q: WWW-Authenticate %q", name, h, got)
			}
		}
		for tok, role := range tokens {
			r := sendAuth("Bearer " + tok)
			switch {
			case rt.need == "" || allowed(role, rt.need):
				if r.code == http.StatusUnauthorized || r.code == http.StatusForbidden {
					t.Errorf("%s as %s: %d %s, want allowed", name, role, r.code, r.body)
				}
			default:
				p := problem(t, r, http.StatusForbidden, client.ProblemForbidden)
				if !strings.Contains(p.Detail, string(rt.need)) {
					t.Errorf("%s as %s: detail %q does not name the needed role", name, role, p.Detail)
				}
			}
		}
		// The all-roles token passes everywhere; the scheme is case-insensitive.
		if r := sendAuth("bearer " + apitest.AllToken); r.code == http.StatusUnauthorized || r.code == http.StatusForbidden {
			t.Errorf("%s with all roles: %d", name, r.code)
		}
	}
}
