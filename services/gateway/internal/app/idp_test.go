package app

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// TestIdentityProviderTokens points the gateway at an identity provider's
// JWKS: an RS256 token from that key submits and reads the member's tasks;
// a token from any other key, or an HS256 token keyed with the provider's
// public key (algorithm confusion), gets 401.
func TestIdentityProviderTokens(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jwk.Import(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	_ = pub.Set(jwk.KeyIDKey, "idp-1")
	set := jwk.NewSet()
	_ = set.AddKey(pub)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(set)
	}))
	defer idp.Close()
	s := startGateway(t, func(c *Config) {
		c.JWT.JWKSURL, c.JWT.Issuer, c.JWT.Audience = idp.URL, "https://idp.example", "orderflow"
	})
	signFor := func(iss, aud string, method jwt.SigningMethod, kid string, k any, member string, roles ...string) string {
		tok := jwt.NewWithClaims(method, jwt.MapClaims{
			"sub": member, "iss": iss, "aud": aud, "exp": time.Now().Add(time.Hour).Unix(), "orderflow_roles": roles,
		})
		tok.Header["kid"] = kid
		out, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	sign := func(method jwt.SigningMethod, kid string, k any, member string) string {
		return signFor("https://idp.example", "orderflow", method, kid, k, member)
	}
	alice := sign(jwt.SigningMethodRS256, "idp-1", key, "alice")
	code, body := s.do(t, "POST", "/v1/order-splits", alice, goodOrder)
	if code != http.StatusOK {
		t.Fatalf("submit with the provider's RS256 token = %d %v, want 200", code, body)
	}
	taskID, _ := body["taskId"].(string)
	if code, body := s.do(t, "GET", "/v1/tasks/"+taskID, alice, ""); code != http.StatusOK {
		t.Errorf("GET own task = %d %v, want 200", code, body)
	}
	if code, _ := s.do(t, "GET", "/v1/tasks/"+taskID, sign(jwt.SigningMethodRS256, "idp-1", key, "bob"), ""); code != http.StatusNotFound {
		t.Errorf("bob GET alice's task = %d, want 404", code)
	}

	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	for name, tok := range map[string]string{
		"other key, provider's kid":       sign(jwt.SigningMethodRS256, "idp-1", other, "alice"),
		"other key, unknown kid":          sign(jwt.SigningMethodRS256, "evil", other, "alice"),
		"HS256 keyed with the public key": sign(jwt.SigningMethodHS256, "idp-1", pubPEM, "alice"),
		// The same provider's tokens for another application or from
		// another issuer, even with the admin role.
		"admin token for another client":  signFor("https://idp.example", "other-client", jwt.SigningMethodRS256, "idp-1", key, "alice", "admin"),
		"admin token from another issuer": signFor("https://other.example", "orderflow", jwt.SigningMethodRS256, "idp-1", key, "alice", "admin"),
	} {
		if code, body := s.do(t, "GET", "/v1/tasks", tok, ""); code != http.StatusUnauthorized {
			t.Errorf("%s: GET /v1/tasks = %d %v, want 401", name, code, body)
		}
		if code, body := s.do(t, "GET", "/v1/ops/overview", tok, ""); code != http.StatusUnauthorized {
			t.Errorf("%s: GET /v1/ops/overview = %d %v, want 401", name, code, body)
		}
	}
	admin := signFor("https://idp.example", "orderflow", jwt.SigningMethodRS256, "idp-1", key, "alice", "admin")
	if code, body := s.do(t, "GET", "/v1/ops/overview", admin, ""); code != http.StatusOK {
		t.Errorf("GET /v1/ops/overview with this client's admin token = %d %v, want 200", code, body)
	}
}
