// Package lease is a Redis lock with an owner token and an expiry: acquired
// with SET NX PX, renewed and released only by the holder of the token
// (compare-and-set in Lua), so a holder that stalls past its lease cannot
// release or extend a lease someone else now holds. The token doubles as a
// fencing token for writes guarded by the lease.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrHeld means someone else holds the lease.
var ErrHeld = errors.New("lease held by another owner")

// ErrLost means the lease expired and may now be held by someone else.
var ErrLost = errors.New("lease lost")

// Lease is a held lease.
type Lease struct {
	rdb   redis.UniversalClient
	Key   string
	Token string
	TTL   time.Duration
}

// Acquire takes the lease at key for ttl, or returns ErrHeld.
func Acquire(ctx context.Context, rdb redis.UniversalClient, key string, ttl time.Duration) (*Lease, error) {
	return AcquireAs(ctx, rdb, key, "", ttl)
}

// AcquireAs takes the lease at key for ttl as owner (a process's name,
// see NewToken), or returns ErrHeld.
func AcquireAs(ctx context.Context, rdb redis.UniversalClient, key, owner string, ttl time.Duration) (*Lease, error) {
	token, err := NewToken(owner)
	if err != nil {
		return nil, err
	}
	ok, err := rdb.SetNX(ctx, key, token, ttl).Result()
	if err != nil {
		return nil, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	if !ok {
		return nil, ErrHeld
	}
	return Taken(rdb, key, token, ttl), nil
}

// Taken is the lease at key that the caller took itself by setting it to
// token with SET NX PX ttl inside a script of its own, e.g. one that reads
// what the lease guards in the same round trip; it renews and releases on
// rdb like one from Acquire.
func Taken(rdb redis.UniversalClient, key, token string, ttl time.Duration) *Lease {
	return &Lease{rdb: rdb, Key: key, Token: token, TTL: ttl}
}

// renewScript extends the lease if the caller still holds it.
// KEYS[1] lease key; ARGV[1] token, ARGV[2] ttl in ms. Returns 1 or 0.
var renewScript = redis.NewScript(`
-- KEYS lease | ARGV token, ttl ms | returns 1 renewed, 0 not held
local leaseKey = KEYS[1]
if redis.call('GET', leaseKey) == ARGV[1] then
  return redis.call('PEXPIRE', leaseKey, ARGV[2])
end
return 0`)

// releaseScript deletes the lease if the caller still holds it.
// KEYS[1] lease key; ARGV[1] token. Returns 1 or 0.
var releaseScript = redis.NewScript(`
-- KEYS lease | ARGV token | returns 1 released, 0 not held
local leaseKey = KEYS[1]
if redis.call('GET', leaseKey) == ARGV[1] then
  return redis.call('DEL', leaseKey)
end
return 0`)

// Renew extends the lease by its TTL, or returns ErrLost.
func (l *Lease) Renew(ctx context.Context) error {
	n, err := renewScript.Run(ctx, l.rdb, []string{l.Key}, l.Token, l.TTL.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.Key, err)
	}
	if n == 0 {
		return ErrLost
	}
	return nil
}

// Release gives the lease up if still held.
func (l *Lease) Release(ctx context.Context) error {
	if _, err := releaseScript.Run(ctx, l.rdb, []string{l.Key}, l.Token).Result(); err != nil {
		return fmt.Errorf("release lease %s: %w", l.Key, err)
	}
	return nil
}

// KeepAlive renews the lease every TTL/3 until ctx ends. When a renewal
// finds the lease lost, it calls lost (which should cancel the guarded
// work) and returns. Transient Redis errors are retried at the next tick.
func (l *Lease) KeepAlive(ctx context.Context, lost func()) {
	t := time.NewTicker(l.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.Renew(ctx); errors.Is(err, ErrLost) {
				lost()
				return
			}
		}
	}
}

// ownerSep ends the owner's name in a token.
const ownerSep = "~"

// NewToken returns a fresh token (16 random bytes, base64url), after
// "<owner>~" when owner is not empty, so that operators see which process
// holds what the token stands for (OwnerOf): a lease's owner token, also
// for a lease taken by the caller's own script (see Taken). The owner
// keeps only the characters of OwnerName.
func NewToken(owner string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lease token: %w", err)
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	if owner = OwnerName(owner); owner != "" {
		tok = owner + ownerSep + tok
	}
	return tok, nil
}

// OwnerOf returns the owner a token of NewToken names ("" when none).
func OwnerOf(token string) string {
	o, _, ok := strings.Cut(token, ownerSep)
	if !ok {
		return ""
	}
	return o
}

// OwnerName keeps the characters of name a token carries (letters, digits,
// '.', '_' and '-'), at most 63.
func OwnerName(name string) string {
	out := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return -1
	}, name)
	if len(out) > 63 {
		out = out[:63]
	}
	return out
}
