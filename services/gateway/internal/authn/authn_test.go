package authn

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/orderflow/orderflow/pkg/platform/auth"
)

func TestRequireRole(t *testing.T) {
	cfg := auth.Config{Secret: []byte("0123456789abcdef-test-secret")}
	v, err := auth.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := New(v, nil)
	admin, _ := auth.Issue(cfg, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	member, _ := auth.Issue(cfg, "alice", time.Now(), time.Hour)
	withToken := func(tok string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
	}
	tests := []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"admin", withToken(admin), codes.OK},
		{"member without role", withToken(member), codes.PermissionDenied},
		{"no token", context.Background(), codes.Unauthenticated},
		{"bad token", withToken("x.y.z"), codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // second round is served from the cache
				ctx, err := a.RequireRole(tt.ctx, auth.RoleAdmin)
				if got := status.Code(err); got != tt.want {
					t.Fatalf("RequireRole = %v, want %v", got, tt.want)
				}
				if tt.want == codes.OK && !auth.HasRole(ctx, auth.RoleAdmin) {
					t.Fatal("identity with the admin role not on the returned context")
				}
			}
		})
	}
}
