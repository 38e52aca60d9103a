package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// idp is an identity provider in process: a JWKS endpoint whose keys a
// test can rotate or take down, and an OIDC discovery document.
type idp struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	keys    map[string]crypto.Signer // kid → private key published
	down    bool
	fetches atomic.Int32
}

func newIDP(t *testing.T) *idp {
	p := &idp{t: t, keys: map[string]crypto.Signer{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jwks.json", func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		set := jwk.NewSet()
		for kid, k := range p.keys {
			pub, err := jwk.Import(k.Public())
			if err != nil {
				t.Error(err)
				return
			}
			_ = pub.Set(jwk.KeyIDKey, kid)
			_ = pub.Set(jwk.KeyUsageKey, "sig")
			_ = set.AddKey(pub)
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/jwks.json"})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) publish(kid string, k crypto.Signer) {
	p.mu.Lock()
	p.keys[kid] = k
	p.mu.Unlock()
}

func (p *idp) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signed returns a token for claims signed by key with kid under method.
func signed(t *testing.T, method jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func newJWKSVerifier(t *testing.T, opts JWKSOptions, cfg Config) *Verifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts.Refresh = time.Hour // no background refresh during a test
	ks, err := NewKeySet(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Keys = ks
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func idpClaims(iss string) jwt.MapClaims {
	return jwt.MapClaims{"sub": "alice", "iss": iss, "aud": "orderflow", "exp": time.Now().Add(time.Hour).Unix(), "orderflow_roles": []string{"admin"}}
}

// TestJWKSAlgorithms verifies RS256, ES256 and EdDSA tokens of an identity
// provider by kid, with iss and aud checked and the member id and roles
// read from the claims.
func TestJWKSAlgorithms(t *testing.T) {
	p := newIDP(t)
	rk := rsaKey(t)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edk, _ := ed25519.GenerateKey(rand.Reader)
	p.publish("rsa-1", rk)
	p.publish("ec-1", ek)
	p.publish("ed-1", edk)
	v := newJWKSVerifier(t, JWKSOptions{URL: p.srv.URL + "/jwks.json"}, Config{Issuer: p.srv.URL, Audience: "orderflow"})
	for _, tc := range []struct {
		method jwt.SigningMethod
		kid    string
		key    any
	}{{jwt.SigningMethodRS256, "rsa-1", rk}, {jwt.SigningMethodES256, "ec-1", ek}, {jwt.SigningMethodEdDSA, "ed-1", edk}} {
		t.Run(tc.method.Alg(), func(t *testing.T) {
			id, err := v.Verify(signed(t, tc.method, tc.kid, tc.key, idpClaims(p.srv.URL)))
			if err != nil {
				t.Fatalf("Verify = %v", err)
			}
			if id.Member != "alice" || !id.HasRole(RoleAdmin) {
				t.Errorf("identity = %+v, want alice with admin", id)
			}
		})
	}
}

// TestJWKSRefusesForeignTokens covers the tokens an attacker can make: a
// key not in the set (under a known and an unknown kid), an HS256 token
// keyed with the provider's public key (algorithm confusion), alg none,
// another issuer or audience, an expired token and one without kid.
func TestJWKSRefusesForeignTokens(t *testing.T) {
	p := newIDP(t)
	rk := rsaKey(t)
	p.publish("rsa-1", rk)
	secret := []byte("0123456789abcdef-0123456789abcdef")
	v := newJWKSVerifier(t, JWKSOptions{URL: p.srv.URL + "/jwks.json"}, Config{Secret: secret, Issuer: p.srv.URL, Audience: "orderflow"})
	good := idpClaims(p.srv.URL)
	if _, err := v.Verify(signed(t, jwt.SigningMethodRS256, "rsa-1", rk, good)); err != nil {
		t.Fatalf("Verify(valid RS256) = %v", err)
	}
	other := rsaKey(t)
	pubDER, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	jwkJSON, _ := json.Marshal(must(jwk.Import(&rk.PublicKey)))
	with := func(k string, val any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		c[k] = val
		return c
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, good).SignedString(jwt.UnsafeAllowNoneSignatureType)
	tests := map[string]string{
		"other key, known kid":               signed(t, jwt.SigningMethodRS256, "rsa-1", other, good),
		"other key, unknown kid":             signed(t, jwt.SigningMethodRS256, "rsa-evil", other, good),
		"no kid":                             signed(t, jwt.SigningMethodRS256, "", rk, good),
		"HS256 keyed with the public PEM":    signed(t, jwt.SigningMethodHS256, "rsa-1", pubPEM, good),
		"HS256 keyed with the public DER":    signed(t, jwt.SigningMethodHS256, "rsa-1", pubDER, good),
		"HS256 keyed with the JWK JSON":      signed(t, jwt.SigningMethodHS256, "rsa-1", jwkJSON, good),
		"HS512 keyed with the shared secret": signed(t, jwt.SigningMethodHS512, "", secret, good),
		"alg none":                           none,
		"other issuer":                       signed(t, jwt.SigningMethodRS256, "rsa-1", rk, with("iss", "https://evil.example")),
		"other audience":                     signed(t, jwt.SigningMethodRS256, "rsa-1", rk, with("aud", "someone-else")),
		"expired":                            signed(t, jwt.SigningMethodRS256, "rsa-1", rk, with("exp", time.Now().Add(-time.Hour).Unix())),
	}
	for name, tok := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := v.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("Verify = %v, want ErrUnauthenticated", err)
			}
		})
	}
	// Without a shared secret HS256 is not accepted at all.
	v = newJWKSVerifier(t, JWKSOptions{URL: p.srv.URL + "/jwks.json"}, Config{})
	if _, err := v.Verify(tests["HS256 keyed with the public PEM"]); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("JWKS only: Verify(HS256 confused) = %v, want ErrUnauthenticated", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestJWKSRotationAndOutage rotates the provider's key: a token with the
// new kid fetches the set again (at most once per interval however many
// unknown kids arrive), and while the provider is down the cached keys
// keep verifying.
func TestJWKSRotationAndOutage(t *testing.T) {
	p := newIDP(t)
	oldKey, newKey := rsaKey(t), rsaKey(t)
	p.publish("k1", oldKey)
	clk := &fakeNow{t: time.Unix(1_800_000_000, 0)}
	v := newJWKSVerifier(t, JWKSOptions{URL: p.srv.URL + "/jwks.json", UnknownKIDInterval: time.Minute, Now: clk.now}, Config{})
	claims := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
	if _, err := v.Verify(signed(t, jwt.SigningMethodRS256, "k1", oldKey, claims)); err != nil {
		t.Fatalf("Verify(k1) = %v", err)
	}
	start := p.fetches.Load()

	// Unknown kids within the interval: one fetch at most.
	clk.add(2 * time.Minute)
	for range 20 {
		if _, err := v.Verify(signed(t, jwt.SigningMethodRS256, "random-kid", newKey, claims)); err == nil {
			t.Fatal("Verify(unknown kid) succeeded")
		}
	}
	if got := p.fetches.Load() - start; got != 1 {
		t.Errorf("fetches for 20 unknown kids = %d, want 1", got)
	}

	// Rotation: k2 published; within the interval it is not fetched yet,
	// after it the first k2 token fetches and verifies.
	p.publish("k2", newKey)
	tok2 := signed(t, jwt.SigningMethodRS256, "k2", newKey, claims)
	if _, err := v.Verify(tok2); err == nil {
		t.Fatal("Verify(k2) within the refetch interval succeeded without a fetch")
	}
	clk.add(time.Minute)
	if _, err := v.Verify(tok2); err != nil {
		t.Fatalf("Verify(k2) after rotation = %v", err)
	}

	// Outage: the provider answers 503; known keys keep verifying.
	p.setDown(true)
	clk.add(time.Hour)
	if _, err := v.Verify(signed(t, jwt.SigningMethodRS256, "k3", rsaKey(t), claims)); err == nil {
		t.Fatal("Verify(k3) during the outage succeeded")
	}
	for _, tc := range []struct {
		kid string
		key *rsa.PrivateKey
	}{{"k1", oldKey}, {"k2", newKey}} {
		if _, err := v.Verify(signed(t, jwt.SigningMethodRS256, tc.kid, tc.key, claims)); err != nil {
			t.Errorf("Verify(%s) during the outage = %v, want the cached key to verify", tc.kid, err)
		}
	}
}

// TestOIDCDiscovery finds the key set through the issuer's discovery
// document and checks iss against it.
func TestOIDCDiscovery(t *testing.T) {
	p := newIDP(t)
	k := rsaKey(t)
	p.publish("k1", k)
	v := newJWKSVerifier(t, JWKSOptions{OIDCIssuer: p.srv.URL}, Config{Issuer: p.srv.URL, MemberClaim: "preferred_username"})
	claims := jwt.MapClaims{"sub": "0b7e-uuid-like", "preferred_username": "bob", "iss": p.srv.URL, "exp": time.Now().Add(time.Hour).Unix()}
	id, err := v.Verify(signed(t, jwt.SigningMethodRS256, "k1", k, claims))
	if err != nil || id.Member != "bob" {
		t.Fatalf("Verify = %+v, %v; want member bob from preferred_username", id, err)
	}
}

// TestOIDCDiscoveryIsThrottledBeforeItsFirstSuccess: while the issuer's
// discovery document fails, 20 tokens cause one discovery request (the one
// at start), not one each; after UnknownKIDInterval the next token tries
// again, and once discovery succeeds the provider's tokens verify.
func TestOIDCDiscoveryIsThrottledBeforeItsFirstSuccess(t *testing.T) {
	p := newIDP(t)
	k := rsaKey(t)
	p.publish("k1", k)
	var discoveries atomic.Int32
	var up atomic.Bool
	issuer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		discoveries.Add(1)
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": "http://" + r.Host, "jwks_uri": p.srv.URL + "/jwks.json"})
	}))
	t.Cleanup(issuer.Close)
	clk := &fakeNow{t: time.Now()}
	v := newJWKSVerifier(t, JWKSOptions{OIDCIssuer: issuer.URL, UnknownKIDInterval: time.Minute, Now: clk.now}, Config{Issuer: issuer.URL})
	forger := rsaKey(t)
	for i := range 20 {
		garbage := signed(t, jwt.SigningMethodRS256, fmt.Sprint("kid-", i), forger, idpClaims(issuer.URL))
		if _, err := v.Verify(garbage); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("Verify(garbage %d) = %v, want ErrUnauthenticated", i, err)
		}
	}
	if got := discoveries.Load(); got != 1 {
		t.Errorf("discovery requests after 20 tokens = %d, want 1", got)
	}
	up.Store(true)
	clk.add(time.Minute)
	if _, err := v.Verify(signed(t, jwt.SigningMethodRS256, "k1", k, idpClaims(issuer.URL))); err != nil {
		t.Errorf("Verify after the interval with discovery up = %v, want the identity", err)
	}
	if got := discoveries.Load(); got != 2 {
		t.Errorf("discovery requests = %d, want 2", got)
	}
}
