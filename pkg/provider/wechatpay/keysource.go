package wechatpay

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/orderflow/orderflow/pkg/platform/clock"
)

// KeySource returns the provider's public key that has a given serial: a
// platform certificate serial number or a WeChat Pay public key id
// (PUB_KEY_ID_…). It is how the merchant checks the Wechatpay-Serial of a
// response or notification before verifying its signature.
type KeySource interface {
	Key(ctx context.Context, serial string) (*rsa.PublicKey, error)
}

// ErrUnknownSerial means no configured or fetched provider key has the
// serial a response or notification names.
var ErrUnknownSerial = errors.New("wechatpay: unknown provider key serial")

// PublicKeyIDPrefix starts the id of a WeChat Pay public key, the serial
// the provider sends in Wechatpay-Serial when it signs with that key.
const PublicKeyIDPrefix = "PUB_KEY_ID_"

// StaticKeys is a fixed set of provider keys by serial: the WeChat Pay
// public key under its id, or platform certificates read from files.
type StaticKeys map[string]*rsa.PublicKey

// Key returns the key with the given serial or ErrUnknownSerial.
func (s StaticKeys) Key(_ context.Context, serial string) (*rsa.PublicKey, error) {
	if k, ok := s[serial]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownSerial, serial)
}

// CombinedKeys asks each source in turn (a merchant moving from platform
// certificates to the WeChat Pay public key receives both serials for a
// while). It answers the first key found; when none has the serial, the
// last error.
type CombinedKeys []KeySource

// Key implements KeySource.
func (c CombinedKeys) Key(ctx context.Context, serial string) (*rsa.PublicKey, error) {
	err := fmt.Errorf("%w %q", ErrUnknownSerial, serial)
	for _, s := range c {
		var k *rsa.PublicKey
		if k, err = s.Key(ctx, serial); err == nil {
			return k, nil
		}
	}
	return nil, err
}

// Intervals of PlatformKeys.
const (
	// refetchInterval bounds how often an unknown serial triggers a fetch
	// after a successful one.
	refetchInterval = 30 * time.Second
	// failureTTL is how long a failed fetch is remembered: until then
	// every unknown serial is answered with that failure, without a call.
	failureTTL = 5 * time.Second
	// fetchTimeout bounds one fetch (it runs on behalf of every waiting
	// caller, so it does not follow any one caller's context).
	fetchTimeout = 30 * time.Second
)

// PlatformKeys caches the provider's platform certificate keys by serial,
// filled by fetch (GET /v3/certificates) on first use and refreshed when an
// unknown serial shows up, at most every 30 s. The lock is never held
// across a fetch: a known serial is answered at once while a fetch runs;
// callers with unknown serials share one fetch (singleflight); a failed
// fetch is remembered for 5 s. So callbacks with made-up serials, which
// anyone can send, cannot stall valid ones or hammer the provider.
type PlatformKeys struct {
	fetch func(ctx context.Context) (map[string]*rsa.PublicKey, error)
	clock clock.Clock
	group singleflight.Group

	mu        sync.Mutex
	keys      map[string]*rsa.PublicKey
	lastFetch time.Time // of the last successful fetch
	lastFail  time.Time // of the last failed fetch
	failErr   error
}

// NewPlatformKeys returns a cache filled by fetch.
func NewPlatformKeys(fetch func(ctx context.Context) (map[string]*rsa.PublicKey, error), clk clock.Clock) *PlatformKeys {
	if clk == nil {
		clk = clock.Real{}
	}
	return &PlatformKeys{fetch: fetch, clock: clk}
}

// Key returns the platform key with the given serial, fetching the keys
// when the serial is unknown and the last fetch is old enough.
func (p *PlatformKeys) Key(ctx context.Context, serial string) (*rsa.PublicKey, error) {
	k, fetch, err := p.lookup(serial)
	if !fetch {
		return k, err
	}
	ch := p.group.DoChan("fetch", func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer cancel()
		keys, err := p.fetch(fctx)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.lastFail, p.failErr = p.clock.Now(), err
			return nil, err
		}
		p.keys, p.lastFetch, p.failErr = keys, p.clock.Now(), nil
		return nil, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, fmt.Errorf("wechatpay: fetch platform keys for serial %q: %w", serial, r.Err)
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.keys[serial]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownSerial, serial)
}

// lookup answers from the cache, or reports that a fetch is due.
func (p *PlatformKeys) lookup(serial string) (*rsa.PublicKey, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.keys[serial]; ok {
		return k, false, nil
	}
	now := p.clock.Now()
	if p.failErr != nil && now.Sub(p.lastFail) < failureTTL {
		return nil, false, fmt.Errorf("wechatpay: platform keys unavailable (serial %q): %w", serial, p.failErr)
	}
	if p.keys != nil && now.Sub(p.lastFetch) < refetchInterval {
		return nil, false, fmt.Errorf("%w %q", ErrUnknownSerial, serial)
	}
	return nil, true, nil
}
