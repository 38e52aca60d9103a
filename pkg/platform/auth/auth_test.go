package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
)

var testSecret = []byte("0123456789abcdef-test-secret")

func sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyRoles(t *testing.T) {
	exp := time.Now().Add(time.Hour).Unix()
	tests := []struct {
		name       string
		rolesClaim string
		claims     jwt.MapClaims
		want       []string
	}{
		{"default claim array", "", jwt.MapClaims{"sub": "alice", "exp": exp, "orderflow_roles": []string{"admin", "viewer"}}, []string{"admin", "viewer"}},
		{"space separated string", "", jwt.MapClaims{"sub": "alice", "exp": exp, "orderflow_roles": "admin viewer"}, []string{"admin", "viewer"}},
		{"no roles", "", jwt.MapClaims{"sub": "alice", "exp": exp}, nil},
		{"configured claim", "roles", jwt.MapClaims{"sub": "alice", "exp": exp, "roles": []string{"admin"}, "orderflow_roles": []string{"ignored"}}, []string{"admin"}},
		{"nested claim", "realm_access.roles", jwt.MapClaims{"sub": "alice", "exp": exp, "realm_access": map[string]any{"roles": []string{"admin"}}}, []string{"admin"}},
		{"non-string entries skipped", "", jwt.MapClaims{"sub": "alice", "exp": exp, "orderflow_roles": []any{"admin", 7, true}}, []string{"admin"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewVerifier(Config{Secret: testSecret, RolesClaim: tt.rolesClaim})
			if err != nil {
				t.Fatal(err)
			}
			id, err := v.Verify(sign(t, tt.claims))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if id.Member != "alice" {
				t.Errorf("Member = %q, want alice", id.Member)
			}
			if diff := cmp.Diff(tt.want, id.Roles); diff != "" {
				t.Errorf("Roles (-want +got):\n%s", diff)
			}
			if id.Expires.Unix() != exp {
				t.Errorf("Expires = %v, want %v", id.Expires.Unix(), exp)
			}
		})
	}
}

func TestIssueRolesRoundTrip(t *testing.T) {
	cfg := Config{Secret: testSecret, RolesClaim: "roles"}
	tok, err := Issue(cfg, "ops-1", time.Now(), time.Hour, RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := NewVerifier(cfg)
	id, err := v.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if !id.HasRole(RoleAdmin) || id.HasRole("viewer") {
		t.Errorf("HasRole: roles = %v, want exactly admin", id.Roles)
	}
	ctx := WithIdentity(context.Background(), id)
	if !HasRole(ctx, RoleAdmin) {
		t.Error("HasRole(ctx, admin) = false, want true")
	}
	if m, ok := MemberFrom(ctx); !ok || m != "ops-1" {
		t.Errorf("MemberFrom = %q, %v, want ops-1", m, ok)
	}
	if HasRole(context.Background(), RoleAdmin) {
		t.Error("HasRole on an empty context = true")
	}
	member, _ := Issue(cfg, "alice", time.Now(), time.Hour)
	id, err = v.Verify(member)
	if err != nil || id.HasRole(RoleAdmin) {
		t.Errorf("member token: roles %v, err %v; want no roles", id.Roles, err)
	}
}

func TestVerifyRefusesBadTokens(t *testing.T) {
	v, _ := NewVerifier(Config{Secret: testSecret, Issuer: "https://idp", Audience: "orderflow"})
	good := jwt.MapClaims{"sub": "alice", "iss": "https://idp", "aud": "orderflow", "exp": time.Now().Add(time.Hour).Unix()}
	with := func(k string, val any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, good).SignedString(jwt.UnsafeAllowNoneSignatureType)
	wrongKey, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, good).SignedString([]byte("another-secret-0123456789"))
	tests := map[string]string{
		"expired":      sign(t, with("exp", time.Now().Add(-time.Hour).Unix())),
		"no exp":       sign(t, with("exp", nil)),
		"other issuer": sign(t, with("iss", "https://evil")),
		"other aud":    sign(t, with("aud", "someone-else")),
		"no sub":       sign(t, with("sub", nil)),
		"bad sub":      sign(t, with("sub", "a b")),
		"alg none":     none,
		"wrong key":    wrongKey,
		"garbage":      "not.a.token",
	}
	if _, err := v.Verify(sign(t, good)); err != nil {
		t.Fatalf("Verify(good) = %v", err)
	}
	for name, tok := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := v.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("Verify = %v, want ErrUnauthenticated", err)
			}
		})
	}
}
