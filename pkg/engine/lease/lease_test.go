package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/scriptkeys"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestOnlyTheHolderRenewsAndReleases(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	key := prefix + ":lease"
	l, err := Acquire(ctx, rdb, key, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(ctx, rdb, key, time.Second); !errors.Is(err, ErrHeld) {
		t.Errorf("Acquire(held) = %v, want ErrHeld", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Errorf("Renew() by the holder = %v, want nil", err)
	}
	stale := &Lease{rdb: rdb, Key: key, Token: "someone-else", TTL: time.Second}
	if err := stale.Renew(ctx); !errors.Is(err, ErrLost) {
		t.Errorf("Renew() by another token = %v, want ErrLost", err)
	}
	_ = stale.Release(ctx)
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Errorf("after another token's Release, Exists = %d, %v, want 1", n, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release() by the holder = %v, want nil", err)
	}
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("after the holder's Release, Exists = %d, %v, want 0", n, err)
	}
}

// TestTokensNameTheirOwner checks that a lease taken as an owner carries
// its name (only the characters a token may carry), that one without an
// owner names none, and that the holder still renews and releases it.
func TestTokensNameTheirOwner(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	for _, tc := range []struct{ owner, want string }{
		{"splitworker-7c9f.42", "splitworker-7c9f.42"},
		{"host name~/x", "hostnamex"},
		{"", ""},
		{strings.Repeat("a", 80), strings.Repeat("a", 63)},
	} {
		l, err := AcquireAs(ctx, rdb, prefix+":lease:"+tc.want, tc.owner, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := OwnerOf(l.Token); got != tc.want {
			t.Errorf("OwnerOf(token of %q) = %q, want %q (token %s)", tc.owner, got, tc.want, l.Token)
		}
		if err := l.Renew(ctx); err != nil {
			t.Errorf("Renew() = %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release() = %v", err)
		}
	}
}

// TestScriptsDeclareTheirKeys runs the package's tests on a Redis of their
// own under MONITOR and fails for every key a script touched without
// declaring it in KEYS (Redis Cluster routes a script by its KEYS).
func TestScriptsDeclareTheirKeys(t *testing.T) {
	scriptkeys.CheckPackage(t, map[string]*redis.Script{"renew": renewScript, "release": releaseScript}, "^Test")
}

// TestScriptsNameTheirKeys fails for every key a script addresses by its
// position (KEYS[n]) outside the lines that bind the keys to names.
func TestScriptsNameTheirKeys(t *testing.T) {
	scriptkeys.CheckNames(t)
}
