package app

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestPublicReadinessHidesDependencies: with Redis unreachable, the
// gateway's public /readyz and /healthz answer 503 with the status only;
// the failed dependency and its error (an address inside the cluster) are
// shown to an admin, not to anyone else (a service's token included).
func TestPublicReadinessHidesDependencies(t *testing.T) {
	deadRedis := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	s := startGateway(t, func(c *Config) {
		c.Redis.Addr = deadRedis
		c.ReconcilerToken = config.Secret("gateway-reconciler-token-0123456789")
	})
	admin, err := auth.Issue(auth.Config{Secret: []byte(s.cfg.JWT.Secret.Reveal())}, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.addrs.HTTP+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		for _, tc := range []struct {
			name, token string
			details     bool
		}{
			{"anonymous", "", false},
			{"member", s.token(t, "alice"), false},
			{"garbage token", "not-a-token", false},
			{"service token", s.cfg.ReconcilerToken.Reveal(), false},
			{"admin", admin, true},
		} {
			code, body := get(path, tc.token)
			if code != http.StatusServiceUnavailable {
				t.Errorf("%s GET %s = %d, want 503 (Redis is down)", tc.name, path, code)
			}
			shows := strings.Contains(body, "redis") || strings.Contains(body, deadRedis)
			switch {
			case tc.details && !shows:
				t.Errorf("%s GET %s = %s, want the failed dependency named", tc.name, path, body)
			case !tc.details && body != `{"status":"unavailable"}`:
				t.Errorf("%s GET %s = %s, want exactly {\"status\":\"unavailable\"}", tc.name, path, body)
			}
		}
	}
}
