// Package auth verifies and issues the members' bearer tokens (HS256 JWTs
// with the member id in "sub") and checks the static service-to-service
// token that internal gRPC callers present.
package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Config is the token part of a service's configuration.
type Config struct {
	Secret   []byte
	Issuer   string
	Audience string
	// Leeway tolerates clock skew on exp / nbf / iat.
	Leeway time.Duration
}

// ErrUnauthenticated is returned for a missing, malformed, expired or
// badly signed token.
var ErrUnauthenticated = errors.New("unauthenticated")

// Verifier checks members' bearer tokens.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
}

// NewVerifier returns a Verifier that accepts only HS256 tokens with exp,
// checking iss and aud when they are configured.
func NewVerifier(cfg Config) (*Verifier, error) {
	if len(cfg.Secret) < 16 {
		return nil, errors.New("jwt secret must be at least 16 bytes")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(cfg.Leeway),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	return &Verifier{cfg: cfg, parser: jwt.NewParser(opts...)}, nil
}

// Member returns the member id of a valid token.
func (v *Verifier) Member(token string) (string, error) {
	m, _, err := v.Verify(token)
	return m, err
}

// Verify returns the member id and expiry of a valid token.
func (v *Verifier) Verify(token string) (member string, expires time.Time, err error) {
	var claims jwt.RegisteredClaims
	_, err = v.parser.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) {
		return v.cfg.Secret, nil
	})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if !ValidMemberID(claims.Subject) {
		return "", time.Time{}, fmt.Errorf("%w: token has no valid sub", ErrUnauthenticated)
	}
	return claims.Subject, claims.ExpiresAt.Time, nil
}

// FromHeader extracts the token from an "Authorization: Bearer <token>"
// value.
func FromHeader(h string) (string, error) {
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	return strings.TrimSpace(h[len(prefix):]), nil
}

// Issue signs a token for member valid for ttl. It is used by the dev
// login and by tests.
func Issue(cfg Config, member string, now time.Time, ttl time.Duration) (string, error) {
	if !ValidMemberID(member) {
		return "", fmt.Errorf("invalid member id %q", member)
	}
	claims := jwt.RegisteredClaims{
		Subject:   member,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		Issuer:    cfg.Issuer,
	}
	if cfg.Audience != "" {
		claims.Audience = jwt.ClaimStrings{cfg.Audience}
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(cfg.Secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// ValidMemberID reports whether id is 1 to 64 characters of
// [A-Za-z0-9_.@-]. Member ids end up in Redis keys, so they are restricted.
func ValidMemberID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '_' || r == '-' || r == '.' || r == '@':
		default:
			return false
		}
	}
	return true
}

type memberKey struct{}

// WithMember stores the authenticated member id in ctx.
func WithMember(ctx context.Context, member string) context.Context {
	return context.WithValue(ctx, memberKey{}, member)
}

// MemberFrom returns the authenticated member id stored in ctx.
func MemberFrom(ctx context.Context) (string, bool) {
	m, ok := ctx.Value(memberKey{}).(string)
	return m, ok && m != ""
}

// ServiceTokenEqual compares a presented service token with the expected
// one in constant time.
func ServiceTokenEqual(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
