// Package authn authenticates the gateway's callers from the
// "authorization" metadata that gRPC clients send and that grpc-gateway
// forwards from the HTTP Authorization header.
package authn

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
)

// cacheSize bounds the verified-token cache; it is emptied when full.
const cacheSize = 10000

// cacheFor bounds how long a verified token is trusted without checking
// its signature again (never past its own expiry).
const cacheFor = time.Minute

// Authenticator resolves the calling member from a bearer token. Verified
// tokens are remembered briefly, so a client polling with the same token
// does not pay for HMAC and JSON parsing on every call.
type Authenticator struct {
	v       *auth.Verifier
	limiter Limiter
	now     func() time.Time

	mu    sync.RWMutex
	cache map[string]cached
}

type cached struct {
	id    auth.Identity
	until time.Time
}

// Limiter rate-limits a member's calls.
type Limiter interface {
	Allow(member string) error
}

// New returns an Authenticator using v that also charges every call to the
// member's rate limit (limiter may be nil).
func New(v *auth.Verifier, limiter Limiter) *Authenticator {
	return &Authenticator{v: v, limiter: limiter, now: time.Now, cache: make(map[string]cached)}
}

// Member returns the member id of the caller, or an UNAUTHENTICATED error,
// or a RESOURCE_EXHAUSTED error when the member is over its rate limit.
func (a *Authenticator) Member(ctx context.Context) (string, error) {
	id, err := a.Identity(ctx)
	return id.Member, err
}

// Identity returns the verified identity (member id and roles) of the
// caller, or an UNAUTHENTICATED error, or a RESOURCE_EXHAUSTED error when
// the member is over its rate limit.
func (a *Authenticator) Identity(ctx context.Context) (auth.Identity, error) {
	id, err := a.identity(ctx)
	if err != nil {
		return auth.Identity{}, err
	}
	if a.limiter != nil {
		if err := a.limiter.Allow(id.Member); err != nil {
			return auth.Identity{}, err
		}
	}
	return id, nil
}

// Authenticate verifies the caller and returns ctx carrying its identity
// (auth.IdentityFrom, auth.HasRole and auth.MemberFrom read it).
func (a *Authenticator) Authenticate(ctx context.Context) (context.Context, error) {
	id, err := a.Identity(ctx)
	if err != nil {
		return ctx, err
	}
	return auth.WithIdentity(ctx, id), nil
}

// RequireRole verifies the caller and checks that its token grants role:
// UNAUTHENTICATED without a valid token, PERMISSION_DENIED without the role.
// The returned ctx carries the identity.
func (a *Authenticator) RequireRole(ctx context.Context, role string) (context.Context, error) {
	ctx, err := a.Authenticate(ctx)
	if err != nil {
		return ctx, err
	}
	if !auth.HasRole(ctx, role) {
		return ctx, apierr.New(codes.PermissionDenied, apierr.ReasonPermissionDenied, "the "+role+" role is required")
	}
	return ctx, nil
}

func (a *Authenticator) identity(ctx context.Context) (auth.Identity, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization") // no copy of the whole metadata
	if len(vals) != 1 {
		return auth.Identity{}, unauthenticated("missing bearer token")
	}
	tok, err := auth.FromHeader(vals[0])
	if err != nil {
		return auth.Identity{}, unauthenticated("missing bearer token")
	}
	now := a.now()
	a.mu.RLock()
	c, ok := a.cache[tok]
	a.mu.RUnlock()
	if ok && now.Before(c.until) {
		return c.id, nil
	}
	id, err := a.v.VerifyContext(ctx, tok)
	if err != nil {
		return auth.Identity{}, unauthenticated("invalid or expired token")
	}
	until := now.Add(cacheFor)
	if id.Expires.Before(until) {
		until = id.Expires
	}
	a.mu.Lock()
	if len(a.cache) >= cacheSize {
		clear(a.cache)
	}
	a.cache[tok] = cached{id: id, until: until}
	a.mu.Unlock()
	return id, nil
}

func unauthenticated(msg string) error {
	return apierr.New(codes.Unauthenticated, apierr.ReasonUnauthenticated, msg)
}
