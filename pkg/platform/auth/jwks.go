package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"golang.org/x/sync/singleflight"
)

// Defaults of the identity provider's key set handling.
const (
	// DefaultJWKSRefresh is how often the key set is fetched anew.
	DefaultJWKSRefresh = 15 * time.Minute
	// DefaultJWKSUnknownKIDInterval bounds how often a token with an
	// unknown key id makes the key set be fetched before its time.
	DefaultJWKSUnknownKIDInterval = time.Minute
)

// fetchTimeout bounds one fetch of a discovery document or key set made on
// a caller's behalf.
const fetchTimeout = 5 * time.Second

// ErrUnknownKey means no key of the identity provider's key set has the
// token's key id (kid), even after fetching the set again.
var ErrUnknownKey = errors.New("no key with the token's kid")

// JWKSOptions configures a KeySet.
type JWKSOptions struct {
	// URL is the JWKS document. When empty, OIDCIssuer's discovery
	// document names it (jwks_uri).
	URL string
	// OIDCIssuer is the OpenID Connect issuer whose
	// /.well-known/openid-configuration is read when URL is empty.
	OIDCIssuer string
	// Refresh is how often the set is fetched anew (DefaultJWKSRefresh).
	Refresh time.Duration
	// UnknownKIDInterval bounds the fetches that an unknown kid triggers
	// (DefaultJWKSUnknownKIDInterval).
	UnknownKIDInterval time.Duration
	// HTTPClient fetches the documents (a 10 s timeout client when nil).
	HTTPClient *http.Client
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// KeySet holds an identity provider's public keys (JWKS, parsed and cached
// by github.com/lestrrat-go/jwx): fetched at start when the provider
// answers, refreshed in the background, fetched again when a token names an
// unknown kid (at most once per UnknownKIDInterval, concurrent callers
// sharing one fetch), and served stale while the provider is down.
type KeySet struct {
	opts  JWKSOptions
	cache *jwk.Cache
	group singleflight.Group

	mu          sync.Mutex
	url         string // resolved JWKS URL, "" until discovery succeeded
	lastRefresh time.Time
	// lastResolve and resolveErr are the time and error of the last failed
	// attempt to resolve, so a failing provider is asked at most once per
	// UnknownKIDInterval before it first answers.
	lastResolve time.Time
	resolveErr  error
}

// NewKeySet starts a KeySet; it stops when ctx ends. A provider that does
// not answer at start is not an error: its keys are fetched on a later
// use, at most one attempt (discovery included) per UnknownKIDInterval.
func NewKeySet(ctx context.Context, opts JWKSOptions) (*KeySet, error) {
	if opts.URL == "" && opts.OIDCIssuer == "" {
		return nil, errors.New("a JWKS URL or an OIDC issuer is required")
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultJWKSRefresh
	}
	if opts.UnknownKIDInterval <= 0 {
		opts.UnknownKIDInterval = DefaultJWKSUnknownKIDInterval
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cache, err := jwk.NewCache(ctx, httprc.NewClient())
	if err != nil {
		return nil, fmt.Errorf("jwks cache: %w", err)
	}
	ks := &KeySet{opts: opts, cache: cache}
	_ = ks.resolve(ctx) // best effort: the first token retries
	return ks, nil
}

// resolve finds the JWKS URL (discovery when needed) and registers it with
// the cache once. After a failed attempt it answers that attempt's error,
// without asking the provider, until UnknownKIDInterval has passed.
func (ks *KeySet) resolve(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	ks.mu.Lock()
	done := ks.url != ""
	recent := ks.resolveErr != nil && ks.opts.Now().Sub(ks.lastResolve) < ks.opts.UnknownKIDInterval
	failed := ks.resolveErr
	ks.mu.Unlock()
	if done {
		return nil
	}
	if recent {
		return failed
	}
	_, err, _ := ks.group.Do("resolve", func() (any, error) {
		err := ks.register(ctx)
		ks.mu.Lock()
		ks.lastResolve, ks.resolveErr = ks.opts.Now(), err
		ks.mu.Unlock()
		return nil, err
	})
	return err
}

// register resolves the JWKS URL and registers it with the cache.
func (ks *KeySet) register(ctx context.Context) error {
	u := ks.opts.URL
	if u == "" {
		var err error
		if u, err = ks.discover(ctx); err != nil {
			return err
		}
	}
	if !ks.cache.IsRegistered(ctx, u) {
		err := ks.cache.Register(ctx, u,
			jwk.WithHTTPClient(ks.opts.HTTPClient),
			jwk.WithConstantInterval(ks.opts.Refresh),
			jwk.WithWaitReady(true))
		if err != nil {
			_ = ks.cache.Unregister(ctx, u)
			return fmt.Errorf("fetch jwks %s: %w", u, err)
		}
	}
	ks.mu.Lock()
	ks.url, ks.lastRefresh = u, ks.opts.Now()
	ks.mu.Unlock()
	return nil
}

// discover reads jwks_uri from the issuer's OpenID Connect discovery
// document and checks that the document names the same issuer.
func (ks *KeySet) discover(ctx context.Context) (string, error) {
	issuer := strings.TrimSuffix(ks.opts.OIDCIssuer, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, issuer+"/.well-known/openid-configuration", nil)
	if err != nil {
		return "", fmt.Errorf("oidc discovery: %w", err)
	}
	res, err := ks.opts.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("oidc discovery: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("oidc discovery: %s answered %s", req.URL, res.Status)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, res.Body, 1<<20)).Decode(&doc); err != nil {
		return "", fmt.Errorf("oidc discovery: %w", err)
	}
	if strings.TrimSuffix(doc.Issuer, "/") != issuer || doc.JWKSURI == "" {
		return "", fmt.Errorf("oidc discovery: document names issuer %q and jwks_uri %q, want issuer %q", doc.Issuer, doc.JWKSURI, ks.opts.OIDCIssuer)
	}
	return doc.JWKSURI, nil
}

// PublicKey returns the raw public key (*rsa.PublicKey, *ecdsa.PublicKey or
// ed25519.PublicKey) with key id kid that may verify alg. An unknown kid
// fetches the set again, at most once per UnknownKIDInterval.
func (ks *KeySet) PublicKey(ctx context.Context, kid, alg string) (any, error) {
	if err := ks.resolve(ctx); err != nil {
		return nil, err
	}
	key, ok := ks.lookup(ctx, kid)
	if !ok && ks.refreshDue() {
		if _, err, _ := ks.group.Do("refresh", func() (any, error) {
			ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
			defer cancel()
			_, err := ks.cache.Refresh(ctx, ks.jwksURL())
			return nil, err
		}); err == nil {
			key, ok = ks.lookup(ctx, kid)
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownKey, kid)
	}
	if use, ok := key.KeyUsage(); ok && use != "" && use != "sig" {
		return nil, fmt.Errorf("key %q is for %q, not signatures", kid, use)
	}
	if ka, ok := key.Algorithm(); ok && ka.String() != "" && ka.String() != alg {
		return nil, fmt.Errorf("key %q is for %s, not %s", kid, ka, alg)
	}
	var raw any
	if err := jwk.Export(key, &raw); err != nil {
		return nil, fmt.Errorf("key %q: %w", kid, err)
	}
	return raw, nil
}

func (ks *KeySet) jwksURL() string {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.url
}

// refreshDue reports whether an unknown kid may fetch the set now, and
// if so records the fetch.
func (ks *KeySet) refreshDue() bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	now := ks.opts.Now()
	if now.Sub(ks.lastRefresh) < ks.opts.UnknownKIDInterval {
		return false
	}
	ks.lastRefresh = now
	return true
}

func (ks *KeySet) lookup(ctx context.Context, kid string) (jwk.Key, bool) {
	set, err := ks.cache.Lookup(ctx, ks.jwksURL())
	if err != nil || kid == "" {
		return nil, false
	}
	return set.LookupKeyID(kid)
}
