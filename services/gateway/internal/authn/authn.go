// Package authn authenticates the gateway's callers from the
// "authorization" metadata that gRPC clients send and that grpc-gateway
// forwards from the HTTP Authorization header.
package authn

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/orderflow/orderflow/pkg/apierr"
	"github.com/orderflow/orderflow/pkg/auth"
)

// Authenticator resolves the calling member from a bearer token.
type Authenticator struct {
	v *auth.Verifier
}

// New returns an Authenticator using v.
func New(v *auth.Verifier) *Authenticator { return &Authenticator{v: v} }

// Member returns the member id of the caller, or an UNAUTHENTICATED error.
// It also accepts a context that already carries a member (auth.WithMember).
func (a *Authenticator) Member(ctx context.Context) (string, error) {
	if m, ok := auth.MemberFrom(ctx); ok {
		return m, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return "", unauthenticated("missing bearer token")
	}
	tok, err := auth.FromHeader(vals[0])
	if err != nil {
		return "", unauthenticated("missing bearer token")
	}
	m, err := a.v.Member(tok)
	if err != nil {
		return "", unauthenticated("invalid or expired token")
	}
	return m, nil
}

func unauthenticated(msg string) error {
	return apierr.New(codes.Unauthenticated, apierr.ReasonUnauthenticated, msg)
}
