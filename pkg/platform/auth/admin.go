package auth

import (
	"context"
	"net/http"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// AdminOnly guards an admin HTTP handler: the request must carry
// "Authorization: Bearer <token>" with a token that v verifies and that
// grants RoleAdmin. Admin is for people: no service's token is accepted
// (v may be nil: then nobody is). Otherwise it answers 401 (no or invalid
// credentials) or 403 (a valid token without the admin role) and next is
// not called. The identity of an admin token is on the request's context.
func AdminOnly(next http.Handler, v *Verifier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := FromHeader(r.Header.Get("Authorization"))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderflow-admin"`)
			http.Error(w, "admin credentials required: a token with the admin role", http.StatusUnauthorized)
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
// <token>" with a token that v (may be nil) verifies and that grants
// RoleAdmin; no service's token counts.
func IsAdmin(r *http.Request, v *Verifier) bool {
	tok, err := FromHeader(r.Header.Get("Authorization"))
	if err != nil {
		return false
	}
	if v == nil {
		return false
	}
	id, err := v.VerifyContext(r.Context(), tok)
	return err == nil && id.HasRole(RoleAdmin)
}

// OptionalVerifier builds the Verifier the settings describe, or returns
// nil when neither a shared secret nor an identity provider is configured
// (admin ports then accept nobody as admin).
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
