package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

func TestScrapeOrAdmin(t *testing.T) {
	const scrape = "scrape-token-0123456789abcdef-0123"
	v, err := NewVerifier(Config{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := Issue(Config{Secret: testSecret}, "ops", time.Now(), time.Hour, RoleAdmin)
	member, _ := Issue(Config{Secret: testSecret}, "alice", time.Now(), time.Hour)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	tests := []struct {
		name   string
		token  config.Secret // the configured scrape token
		v      *Verifier
		header string
		want   int
	}{
		{"no credentials", scrape, v, "", http.StatusUnauthorized},
		{"the scrape token", scrape, v, "Bearer " + scrape, http.StatusOK},
		{"the scrape token, lower-case scheme", scrape, v, "bearer " + scrape, http.StatusOK},
		{"a prefix of the scrape token", scrape, v, "Bearer " + scrape[:10], http.StatusUnauthorized},
		{"the scrape token and more", scrape, v, "Bearer " + scrape + "x", http.StatusUnauthorized},
		{"the scrape token without a scheme", scrape, v, scrape, http.StatusUnauthorized},
		{"an admin token", scrape, v, "Bearer " + admin, http.StatusOK},
		{"a member token", scrape, v, "Bearer " + member, http.StatusForbidden},
		{"an admin token, no verifier", scrape, nil, "Bearer " + admin, http.StatusUnauthorized},
		{"no scrape token configured, empty bearer", "", nil, "Bearer ", http.StatusUnauthorized},
		{"no scrape token configured, admin", "", v, "Bearer " + admin, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			ScrapeOrAdmin(ok, ScrapeSettings{Token: tt.token}, tt.v).ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("GET /metrics with %q = %d, want %d", tt.header, rec.Code, tt.want)
			}
		})
	}
}

func TestScrapeSettingsCheckEnv(t *testing.T) {
	dev := ScrapeSettings{}
	if err := dev.CheckEnv(config.Development); err != nil || dev.Token.Reveal() != DevMetricsToken {
		t.Errorf("CheckEnv(development) = %v, token %q; want nil, %q", err, dev.Token.Reveal(), DevMetricsToken)
	}
	for _, tok := range []config.Secret{"", DevMetricsToken, "short-scrape-token"} {
		s := ScrapeSettings{Token: tok}
		if err := s.CheckEnv(config.Production); err == nil {
			t.Errorf("CheckEnv(production) with %q = nil, want an error", tok)
		}
	}
	strong := ScrapeSettings{Token: "scrape-token-0123456789abcdef-0123"}
	if err := strong.CheckEnv(config.Production); err != nil {
		t.Errorf("CheckEnv(production) with a strong token = %v, want nil", err)
	}
}
