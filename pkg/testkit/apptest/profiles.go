package apptest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// ProfilesNeedAdmin checks a service's Go runtime profiles on its admin
// port (base is "http://host:port"): without credentials or with a bad
// token they answer 401, to a member token 403, to a service's token 401
// (admin is for people) and to an admin token 200 with the profile.
func ProfilesNeedAdmin(t *testing.T, base, serviceToken, adminToken, memberToken string) {
	t.Helper()
	get := func(path, bearer string) (int, string) {
		t.Helper()
		return Get(t, base+path, bearer)
	}
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/heap?debug=1":      "heap profile:",
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
	} {
		for who, c := range map[string]struct {
			token  string
			status int
		}{
			"anonymous":   {"", http.StatusUnauthorized},
			"a bad token": {"not-a-token", http.StatusUnauthorized},
			"a member":    {memberToken, http.StatusForbidden},
			"an admin":    {adminToken, http.StatusOK},
			"a service":   {serviceToken, http.StatusUnauthorized},
		} {
			st, body := get(path, c.token)
			if st != c.status {
				t.Errorf("GET %s as %s = %d, want %d", path, who, st, c.status)
			}
			if st == http.StatusOK && !strings.Contains(body, want) {
				t.Errorf("GET %s as %s: body %.80q lacks %q", path, who, body, want)
			}
		}
	}
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
