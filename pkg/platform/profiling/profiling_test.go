package profiling_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/profiling"
)

const serviceToken = "service-token-0123456789abcdefgh"

// get sends a GET (or POST with a body) with an optional bearer token and
// returns the status and body.
func get(t *testing.T, method, url, bearer, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every profile answers 401 without credentials or to a service's token,
// 403 to a member and 200 to an admin token.
func TestProfilesNeedTheAdminCredentials(t *testing.T) {
	cfg := auth.Config{Secret: []byte("profiling-test-secret-0123456789")}
	v, err := auth.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	profiling.Register(mux, func(h http.Handler) http.Handler { return auth.AdminOnly(h, v) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	admin, _ := auth.Issue(cfg, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	member, _ := auth.Issue(cfg, "alice", time.Now(), time.Hour)

	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/debug/pprof/", "", "heap"},
		{"GET", "/debug/pprof/heap?debug=1", "", "heap profile:"},
		{"GET", "/debug/pprof/goroutine?debug=1", "", "goroutine profile:"},
		{"GET", "/debug/pprof/cmdline", "", "profiling.test"},
		{"GET", "/debug/pprof/profile?seconds=1", "", ""},
		{"GET", "/debug/pprof/trace?seconds=0.2", "", ""},
		{"POST", "/debug/pprof/symbol", "0x0", "num_symbols"},
	} {
		if st, _ := get(t, c.method, srv.URL+c.path, "", c.body); st != http.StatusUnauthorized {
			t.Errorf("anonymous %s %s = %d, want 401", c.method, c.path, st)
		}
		if st, _ := get(t, c.method, srv.URL+c.path, "garbage", c.body); st != http.StatusUnauthorized {
			t.Errorf("bad token %s %s = %d, want 401", c.method, c.path, st)
		}
		if st, _ := get(t, c.method, srv.URL+c.path, serviceToken, c.body); st != http.StatusUnauthorized {
			t.Errorf("service token %s %s = %d, want 401", c.method, c.path, st)
		}
		if st, _ := get(t, c.method, srv.URL+c.path, member, c.body); st != http.StatusForbidden {
			t.Errorf("member %s %s = %d, want 403", c.method, c.path, st)
		}
		st, body := get(t, c.method, srv.URL+c.path, admin, c.body)
		if st != http.StatusOK || !strings.Contains(body, c.want) || body == "" {
			t.Errorf("admin %s %s = %d %.80q, want 200 with %q", c.method, c.path, st, body, c.want)
		}
	}
}
