package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// Settings is the token part of a service's environment: an HS256 shared
// secret, an identity provider's key set (JWKS URL or OIDC discovery), or
// both.
type Settings struct {
	Secret      config.Secret `env:"ORDERFLOW_JWT_SECRET" desc:"HS256 shared secret that signs and verifies member and admin tokens." prod:"gateway: required unless an identity provider is set; when set: at least 32 bytes, not the development secret"`
	Issuer      string        `env:"ORDERFLOW_JWT_ISSUER" desc:"Required iss claim of tokens (empty: the OIDC issuer, else not checked)."`
	Audience    string        `env:"ORDERFLOW_JWT_AUDIENCE" desc:"Required aud claim of tokens (empty: not checked)."`
	RolesClaim  string        `env:"ORDERFLOW_JWT_ROLES_CLAIM" envDefault:"orderflow_roles" desc:"Claim holding a token's roles (admin, …)."`
	MemberClaim string        `env:"ORDERFLOW_JWT_MEMBER_CLAIM" envDefault:"sub" desc:"Claim holding a token's member id."`
	JWKSURL     string        `env:"ORDERFLOW_JWT_JWKS_URL" desc:"Identity provider's JWKS URL: tokens signed by its keys are accepted."`
	OIDCIssuer  string        `env:"ORDERFLOW_JWT_OIDC_ISSUER" desc:"OIDC issuer whose discovery document names the JWKS URL."`
	// JWKSRefresh is how often the key set is fetched anew.
	JWKSRefresh time.Duration `env:"ORDERFLOW_JWT_JWKS_REFRESH" envDefault:"15m" desc:"How often the identity provider's key set is fetched anew."`
	// JWKSUnknownKIDInterval bounds the fetches an unknown kid triggers.
	JWKSUnknownKIDInterval time.Duration `env:"ORDERFLOW_JWT_JWKS_UNKNOWN_KID_INTERVAL" envDefault:"1m" desc:"Least time between the key-set fetches that tokens with an unknown kid trigger."`
}

// UsesIdentityProvider reports whether an identity provider's key set is
// configured.
func (s Settings) UsesIdentityProvider() bool { return s.JWKSURL != "" || s.OIDCIssuer != "" }

// CheckEnv applies ORDERFLOW_ENV. With an identity provider configured
// the shared secret is optional (checked only when set), and production
// requires an audience and an issuer (ORDERFLOW_JWT_ISSUER or the OIDC
// issuer), so a token the provider issued to another application is
// refused. Without a provider the secret is required in production and
// defaults to DevJWTSecret in development.
func (s *Settings) CheckEnv(env config.Env) error {
	if s.UsesIdentityProvider() {
		var errs []error
		if !env.Development() && s.Audience == "" {
			errs = append(errs, errors.New("ORDERFLOW_JWT_AUDIENCE is not set (required with an identity provider when ORDERFLOW_ENV=production)"))
		}
		if !env.Development() && s.Issuer == "" && s.OIDCIssuer == "" {
			errs = append(errs, errors.New("ORDERFLOW_JWT_ISSUER is not set (required with ORDERFLOW_JWT_JWKS_URL when ORDERFLOW_ENV=production)"))
		}
		if len(errs) > 0 || s.Secret == "" {
			return errors.Join(errs...)
		}
	}
	if err := env.Secret("ORDERFLOW_JWT_SECRET", &s.Secret, MinSecretLen, DevJWTSecret); err != nil {
		return err
	}
	if len(s.Secret.Reveal()) < 16 {
		return errors.New("ORDERFLOW_JWT_SECRET must be at least 16 bytes")
	}
	return nil
}

// NewVerifier builds the Verifier the settings describe; its key set (if
// any) refreshes in the background until ctx ends. It also returns the
// Config, with which development tokens are issued.
func (s Settings) NewVerifier(ctx context.Context) (*Verifier, Config, error) {
	cfg := Config{
		Secret: []byte(s.Secret.Reveal()), Issuer: s.Issuer, Audience: s.Audience,
		Leeway: 30 * time.Second, RolesClaim: s.RolesClaim, MemberClaim: s.MemberClaim,
	}
	if cfg.Issuer == "" {
		cfg.Issuer = s.OIDCIssuer // an OIDC provider's tokens name it in iss
	}
	if s.UsesIdentityProvider() {
		ks, err := NewKeySet(ctx, JWKSOptions{
			URL: s.JWKSURL, OIDCIssuer: s.OIDCIssuer,
			Refresh: s.JWKSRefresh, UnknownKIDInterval: s.JWKSUnknownKIDInterval,
		})
		if err != nil {
			return nil, cfg, fmt.Errorf("identity provider keys: %w", err)
		}
		cfg.Keys = ks
	}
	v, err := NewVerifier(cfg)
	return v, cfg, err
}
