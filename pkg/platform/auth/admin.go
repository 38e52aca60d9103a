package auth

import (
	"context"
	"net/http"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// AdminOnly guards an admin HTTP handler: the request must carry
// "Authorization: Bearer <token>" with either the service-to-service
// token (compared in constant time) or a token that v verifies and that
// grants RoleAdmin (v may be nil: then only the service token works).
// Otherwise it answers 401 (no or invalid credentials) or 403 (a valid
// token without the admin role) and next is not called. The identity of
// an admin token is on the request's context.
func AdminOnly(next http.Handler, serviceToken string, v *Verifier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := FromHeader(r.Header.Get("Authorization"))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderflow-admin"`)
			http.Error(w, "admin credentials required: the internal token or a token with the admin role", http.StatusUnauthorized)
			return
		}
		if ServiceTokenEqual(tok, serviceToken) {
			next.ServeHTTP(w, r)
			return
		}
		if v == nil {
			http.Error(w, "invalid admin credentials", http.StatusUnauthorized)
			return
		}
		id, err := v.VerifyContext(r.Context(), tok)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderflow-admin", error="invalid_token"`)
			http.Error(w, "invalid admin credentials", http.StatusUnauthorized)
			return
		}
		if !id.HasRole(RoleAdmin) {
			http.Error(w, "the admin role is required", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// IsAdmin reports whether the request carries "Authorization: Bearer
// <token>" with the service-to-service token or a token that v (may be
// nil) verifies and that grants RoleAdmin.
func IsAdmin(r *http.Request, serviceToken string, v *Verifier) bool {
	tok, err := FromHeader(r.Header.Get("Authorization"))
	if err != nil {
		return false
	}
	if ServiceTokenEqual(tok, serviceToken) {
		return true
	}
	if v == nil {
		return false
	}
	id, err := v.VerifyContext(r.Context(), tok)
	return err == nil && id.HasRole(RoleAdmin)
}

// OptionalVerifier builds the Verifier the settings describe, or returns
// nil when neither a shared secret nor an identity provider is configured
// (admin ports then accept only the service token).
func (s Settings) OptionalVerifier(ctx context.Context) (*Verifier, error) {
	if s.Secret == "" && !s.UsesIdentityProvider() {
		return nil, nil
	}
	v, _, err := s.NewVerifier(ctx)
	return v, err
}

// CheckOptional applies ORDERFLOW_ENV to a service that verifies tokens
// only for its admin port: nothing is required, a secret that is set is
// checked as CheckEnv does, and development fills in DevJWTSecret so the
// development admin token works.
func (s *Settings) CheckOptional(env config.Env) error {
	if s.Secret == "" && !env.Development() {
		return nil
	}
	return s.CheckEnv(env)
}
