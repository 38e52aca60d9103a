package auth

import (
	"crypto/subtle"
	"net/http"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// DevMetricsToken is the published development scrape token: a service
// fills it in when ORDERFLOW_ENV=development leaves ORDERFLOW_METRICS_TOKEN
// unset, and refuses it in production.
const DevMetricsToken = "dev-metrics-token"

// ScrapeSettings is the scrape credential of a service's admin port: the
// bearer token with which Prometheus (or anything else that scrapes)
// reads /metrics. Every service of a deployment reads the same one.
type ScrapeSettings struct {
	Token config.Secret `env:"ORDERFLOW_METRICS_TOKEN" desc:"Bearer token that reads /metrics on the admin ports (an admin token does too); it reads nothing else." prod:"required, at least 32 bytes, not the development token"`
}

// CheckEnv applies ORDERFLOW_ENV: production requires a token of at least
// MinSecretLen bytes that is not DevMetricsToken; development fills in
// DevMetricsToken when the token is unset.
func (s *ScrapeSettings) CheckEnv(env config.Env) error {
	return env.Secret("ORDERFLOW_METRICS_TOKEN", &s.Token, MinSecretLen, DevMetricsToken)
}

// ScrapeOrAdmin guards a read-only admin handler such as /metrics: the
// request must carry "Authorization: Bearer <token>" with the scrape
// token (compared in constant time) or a token that v verifies and that
// grants RoleAdmin. Otherwise it answers as AdminOnly does: 401 without
// or with invalid credentials, 403 to a valid token without the admin
// role. An empty scrape token matches nothing.
func ScrapeOrAdmin(next http.Handler, s ScrapeSettings, v *Verifier) http.Handler {
	admin := AdminOnly(next, v)
	want := []byte(s.Token.Reveal())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := FromHeader(r.Header.Get("Authorization"))
		if err == nil && len(want) > 0 && subtle.ConstantTimeCompare([]byte(tok), want) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		admin.ServeHTTP(w, r)
	})
}
