// Package auth verifies and issues the members' bearer tokens (HS256 JWTs
// with a shared secret, or RS256/ES256/EdDSA JWTs from an identity
// provider's JWKS), reads the member id and roles from configurable claims,
// and checks the static service-to-service token that internal gRPC
// callers present.
package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	// RolesClaim names the claim that carries the caller's roles (default
	// DefaultRolesClaim). A dotted name such as "realm_access.roles" walks
	// into nested objects. The claim may be a JSON array of strings or one
	// string of space- or comma-separated roles.
	RolesClaim string
	// MemberClaim names the claim that carries the member id (default
	// "sub").
	MemberClaim string
	// Keys, when set, verifies RS256, ES256 and EdDSA tokens against the
	// identity provider's key set (by kid). Secret may then be empty, and
	// HS256 is accepted only when Secret is set.
	Keys *KeySet
}

// DefaultRolesClaim is the claim read for roles when Config.RolesClaim is
// empty.
const DefaultRolesClaim = "orderflow_roles"

// RoleAdmin is the role that authorises operations.
const RoleAdmin = "admin"

// RolePriority is the role that entitles a member to submit work at high
// priority (taken before other members' work in the running pool).
const RolePriority = "priority"

// Identity is a verified caller: the member id, the roles the token grants
// and when the token expires.
type Identity struct {
	Member  string
	Roles   []string
	Expires time.Time
}

// HasRole reports whether the identity carries role.
func (id Identity) HasRole(role string) bool {
	return slices.Contains(id.Roles, role)
}

// Published development secrets: a service fills them in when
// ORDERFLOW_ENV=development leaves the variable unset, and refuses them in
// production.
const (
	DevJWTSecret = "orderflow-dev-secret-change-me"
)

// MinSecretLen is the shortest JWT secret or service token production
// accepts (bytes).
const MinSecretLen = 32

// ErrUnauthenticated is returned for a missing, malformed, expired or
// badly signed token.
var ErrUnauthenticated = errors.New("unauthenticated")

// Verifier checks members' bearer tokens.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
}

// NewVerifier returns a Verifier that requires exp, checks iss and aud
// when they are configured, and accepts HS256 tokens signed with Secret
// (when set) and RS256, ES256 and EdDSA tokens signed by a key of Keys
// (when set). No other alg is accepted, so "none" is refused, and an HS256
// token is only ever checked against Secret (never a public key).
func NewVerifier(cfg Config) (*Verifier, error) {
	var methods []string
	if len(cfg.Secret) > 0 {
		if len(cfg.Secret) < 16 {
			return nil, errors.New("jwt secret must be at least 16 bytes")
		}
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if cfg.Keys != nil {
		methods = append(methods, jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg(), jwt.SigningMethodEdDSA.Alg())
	}
	if len(methods) == 0 {
		return nil, errors.New("a jwt secret or an identity provider key set is required")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
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
	id, err := v.Verify(token)
	return id.Member, err
}

// Verify returns the identity a valid token carries.
func (v *Verifier) Verify(token string) (Identity, error) {
	return v.VerifyContext(context.Background(), token)
}

// VerifyContext returns the identity a valid token carries; ctx bounds a
// fetch of the identity provider's keys that an unknown kid may cause.
func (v *Verifier) VerifyContext(ctx context.Context, token string) (Identity, error) {
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if t.Method.Alg() == jwt.SigningMethodHS256.Alg() {
			return v.cfg.Secret, nil
		}
		kid, _ := t.Header["kid"].(string)
		return v.cfg.Keys.PublicKey(ctx, kid, t.Method.Alg())
	})
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	return identityFrom(claims, v.cfg.memberClaim(), v.cfg.rolesClaim())
}

func (c Config) memberClaim() string {
	if c.MemberClaim == "" {
		return "sub"
	}
	return c.MemberClaim
}

func (c Config) rolesClaim() string {
	if c.RolesClaim == "" {
		return DefaultRolesClaim
	}
	return c.RolesClaim
}

// identityFrom reads the member id from memberClaim, the roles from
// rolesClaim and the expiry from exp of verified claims.
func identityFrom(claims map[string]any, memberClaim, rolesClaim string) (Identity, error) {
	member, _ := lookup(claims, memberClaim).(string)
	if !ValidMemberID(member) {
		return Identity{}, fmt.Errorf("%w: token has no valid %s", ErrUnauthenticated, memberClaim)
	}
	id := Identity{Member: member}
	switch r := lookup(claims, rolesClaim).(type) {
	case []any:
		for _, e := range r {
			if s, ok := e.(string); ok && s != "" {
				id.Roles = append(id.Roles, s)
			}
		}
	case []string:
		id.Roles = append(id.Roles, r...)
	case string:
		id.Roles = strings.FieldsFunc(r, func(c rune) bool { return c == ' ' || c == ',' })
	}
	switch exp := claims["exp"].(type) {
	case float64:
		id.Expires = time.Unix(int64(exp), 0)
	case json.Number:
		if n, err := exp.Int64(); err == nil {
			id.Expires = time.Unix(n, 0)
		}
	case time.Time:
		id.Expires = exp
	}
	if id.Expires.IsZero() {
		return Identity{}, fmt.Errorf("%w: token has no exp", ErrUnauthenticated)
	}
	return id, nil
}

// lookup returns the value at a dotted claim path, or nil.
func lookup(claims map[string]any, path string) any {
	if v, ok := claims[path]; ok {
		return v
	}
	var cur any = claims
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
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

// Issue signs an HS256 token for member valid for ttl, granting roles in
// the configured roles claim. It is used by the dev login and by tests.
func Issue(cfg Config, member string, now time.Time, ttl time.Duration, roles ...string) (string, error) {
	if !ValidMemberID(member) {
		return "", fmt.Errorf("invalid member id %q", member)
	}
	claims := jwt.MapClaims{
		"sub": member,
		"iat": jwt.NewNumericDate(now),
		"exp": jwt.NewNumericDate(now.Add(ttl)),
	}
	if cfg.Issuer != "" {
		claims["iss"] = cfg.Issuer
	}
	if cfg.Audience != "" {
		claims["aud"] = []string{cfg.Audience}
	}
	if len(roles) > 0 {
		claims[cfg.rolesClaim()] = roles
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

type identityKey struct{}

// WithIdentity stores the verified identity (and so its member id) in ctx.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(WithMember(ctx, id.Member), identityKey{}, id)
}

// IdentityFrom returns the verified identity stored in ctx.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok && id.Member != ""
}

// HasRole reports whether the verified identity in ctx carries role.
func HasRole(ctx context.Context, role string) bool {
	id, ok := IdentityFrom(ctx)
	return ok && id.HasRole(role)
}
