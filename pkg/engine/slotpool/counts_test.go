package slotpool

import (
	"context"
	"testing"
	"time"
)

// TestScriptAnswersMatchRedis checks, after each kind of call, that the
// counts a script answers (holders, waiters) are those in Redis and that
// the fair-queuing state is gone whenever the queue is empty.
func TestScriptAnswersMatchRedis(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 2, Lease: 10 * time.Second})[0]
	ctx := context.Background()
	lease, ttl := p.lease.Milliseconds(), p.waitTTL.Milliseconds()
	enqueue := func(tok, group string) result {
		t.Helper()
		r, err := p.exec(ctx, enqueueOp, tok, "job-"+tok, lease, ttl, Normal.tier(), group)
		if err != nil {
			t.Fatalf("enqueue %s: %v", tok, err)
		}
		return r
	}
	release := func(tok string) result {
		t.Helper()
		r, err := p.exec(ctx, releaseOp, tok, int(Completed), "")
		if err != nil {
			t.Fatalf("release %s: %v", tok, err)
		}
		return r
	}
	cancel := func(tok string) result {
		t.Helper()
		r, err := p.exec(ctx, cancelOp, tok)
		if err != nil {
			t.Fatalf("cancel %s: %v", tok, err)
		}
		return r
	}
	a, b, c, d, e := p.newToken(), p.newToken(), p.newToken(), p.newToken(), p.newToken()
	steps := []struct {
		name       string
		call       func() result
		wantStatus int64
		wantHeld   int64
		wantQueued int64
	}{
		{"a granted at once", func() result { return enqueue(a, "g1") }, 1, 1, 0},
		{"b granted at once", func() result { return enqueue(b, "g2") }, 1, 2, 0},
		{"c queued", func() result { return enqueue(c, "g1") }, 0, 2, 1},
		{"d queued", func() result { return enqueue(d, "g2") }, 0, 2, 2},
		{"a retried", func() result { return enqueue(a, "g1") }, 1, 2, 2},
		{"a released, c granted", func() result { return release(a) }, 1, 2, 1},
		{"a released again", func() result { return release(a) }, 0, 2, 1},
		{"d cancelled", func() result { return cancel(d) }, 0, 2, 0},
		{"e queued", func() result { return enqueue(e, "g3") }, 0, 2, 1},
		{"b released, e granted", func() result { return release(b) }, 1, 2, 0},
		{"c released", func() result { return release(c) }, 1, 1, 0},
		{"e released", func() result { return release(e) }, 1, 0, 0},
	}
	for _, s := range steps {
		r := s.call()
		held, err := p.rdb.ZCard(ctx, p.keys[keyHolders]).Result()
		if err != nil {
			t.Fatal(err)
		}
		queued, err := p.rdb.ZCard(ctx, p.keys[keyPending]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if r.status != s.wantStatus || r.inUse != s.wantHeld || r.waiting != s.wantQueued || held != s.wantHeld || queued != s.wantQueued {
			t.Errorf("%s: status %d, answered %d held %d waiting, Redis %d held %d waiting; want status %d, %d held %d waiting",
				s.name, r.status, r.inUse, r.waiting, held, queued, s.wantStatus, s.wantHeld, s.wantQueued)
		}
		if queued > 0 {
			continue
		}
		state, err := p.rdb.HMGet(ctx, p.keys[keySettings], "v1", "v2", "skip").Result()
		if err != nil {
			t.Fatal(err)
		}
		kept, err := p.rdb.Exists(ctx, p.keys[keyVirtualTags]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if state[0] != nil || state[1] != nil || state[2] != nil || kept != 0 {
			t.Errorf("%s: queue empty but fairness state left: v1/v2/skip %v, vt keys %d", s.name, state, kept)
		}
	}
}
