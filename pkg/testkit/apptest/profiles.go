package apptest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
)

// ProfilesNeedAdmin checks a service's Go runtime profiles on its admin
// port (base is "http://host:port"): without credentials or with a bad
// token they answer 401, to a member token 403, to a service's token 401
// (admin is for people) and to an admin token 200 with the profile.
func ProfilesNeedAdmin(t *testing.T, base, serviceToken, adminToken, memberToken string) {
	t.Helper()
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/heap?debug=1":      "heap profile:",
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
	} {
		Access(t, base+path, want, map[string]Caller{
			"anonymous":   {"", http.StatusUnauthorized},
			"a bad token": {"not-a-token", http.StatusUnauthorized},
			"a member":    {memberToken, http.StatusForbidden},
			"an admin":    {adminToken, http.StatusOK},
			"a service":   {serviceToken, http.StatusUnauthorized},
		})
	}
}

// Caller is one bearer token (none when empty) and the status a GET
// with it must get.
type Caller struct {
	Token  string
	Status int
}

// Access GETs url as each caller (named by the key) and fails the test
// when the status is not the caller's, when a 200 lacks want or when a
// refusal carries want.
func Access(t *testing.T, url, want string, callers map[string]Caller) {
	t.Helper()
	for who, c := range callers {
		st, body := Get(t, url, c.Token)
		switch {
		case st != c.Status:
			t.Errorf("GET %s as %s = %d, want %d", url, who, st, c.Status)
		case st == http.StatusOK && !strings.Contains(body, want):
			t.Errorf("GET %s as %s: body %.80q lacks %q", url, who, body, want)
		case st != http.StatusOK && strings.Contains(body, want):
			t.Errorf("GET %s as %s = %d with %q in the body", url, who, st, want)
		}
	}
}

// MetricsNeedCredentials checks GET url, a service's /metrics on its
// admin port: without credentials, with a bad token, a prefix of the
// scrape token or a service's token it answers 401, to a member token
// 403, and to the scrape token and to an admin token 200 with
// orderflow_build_info.
func MetricsNeedCredentials(t *testing.T, url, scrapeToken, serviceToken, adminToken, memberToken string) {
	t.Helper()
	Access(t, url, "orderflow_build_info", map[string]Caller{
		"anonymous":               {"", http.StatusUnauthorized},
		"a bad token":             {"not-a-token", http.StatusUnauthorized},
		"a scrape token's prefix": {scrapeToken[:len(scrapeToken)-1], http.StatusUnauthorized},
		"a service":               {serviceToken, http.StatusUnauthorized},
		"a member":                {memberToken, http.StatusForbidden},
		"the scrape token":        {scrapeToken, http.StatusOK},
		"an admin":                {adminToken, http.StatusOK},
	})
}

// DevTokens issues an admin token (member "ops") and a member token
// ("alice"), valid for an hour, signed with the development JWT secret a
// development configuration fills in.
func DevTokens(t testing.TB) (admin, member string) {
	t.Helper()
	cfg := auth.Config{Secret: []byte(auth.DevJWTSecret)}
	admin, err := auth.Issue(cfg, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	member, err = auth.Issue(cfg, "alice", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return admin, member
}

// Get GETs url, with bearer as the Authorization token when it is not
// empty, and returns the status code and the body; a failed request fails
// the test.
func Get(t testing.TB, url, bearer string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
