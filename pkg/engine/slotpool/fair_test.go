package slotpool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// queued is a waiter a test lines up behind a held slot.
type queued struct {
	job   string
	class Class
}

// grantOrder holds the pool's only slot, queues the waiters one after the
// other (each seen pending before the next arrives), then releases the
// slot and returns the order in which the waiters were granted. Each
// waiter holds its slot briefly and releases it.
func grantOrder(t *testing.T, p *Pool, waiters []queued) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := mustAcquire(t, p, "first")
	order := make(chan string, len(waiters))
	var wg sync.WaitGroup
	for i, w := range waiters {
		wg.Go(func() {
			s, err := p.AcquireClass(ctx, w.job, w.class)
			if err != nil {
				t.Errorf("AcquireClass(%q) = %v", w.job, err)
				return
			}
			order <- w.job
			time.Sleep(2 * time.Millisecond)
			if err := s.Release(ctx, Completed, ""); err != nil {
				t.Errorf("Release(%q) = %v", w.job, err)
			}
		})
		waitFor(t, w.job+" queued", func() bool { return len(mustSnapshot(t, p).Pending) == i+1 })
	}
	if err := first.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	var got []string
	for j := range order {
		got = append(got, j)
	}
	return got
}

func group(g string, jobs ...string) []queued {
	var out []queued
	for _, j := range jobs {
		out = append(out, queued{j, Class{Group: g}})
	}
	return out
}

func TestRoundRobinAcrossGroupsFIFOWithin(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 5 * time.Second})[0]
	var waiters []queued
	waiters = append(waiters, group("m-a", "a1", "a2", "a3", "a4")...)
	waiters = append(waiters, group("m-b", "b1", "b2")...)
	waiters = append(waiters, group("m-c", "c1")...)
	got := grantOrder(t, p, waiters)
	want := []string{"a1", "b1", "c1", "a2", "b2", "a3", "a4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grant order (-want +got):\n%s", diff)
	}
}

func TestLateGroupIsServedNextNotAfterTheBacklog(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 5 * time.Second})[0]
	waiters := group("bulk", "x1", "x2", "x3", "x4", "x5", "x6")
	waiters = append(waiters, group("small", "s1")...)
	got := grantOrder(t, p, waiters)
	if got[1] != "s1" {
		t.Errorf("grant order %v: the late group's first waiter should come right after the bulk group's first", got)
	}
}

func TestWeightsShareGrants(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 5 * time.Second})[0]
	if err := p.SetWeight(context.Background(), "heavy", 2); err != nil {
		t.Fatal(err)
	}
	waiters := group("heavy", "h1", "h2", "h3", "h4", "h5", "h6")
	waiters = append(waiters, group("light", "l1", "l2", "l3")...)
	got := grantOrder(t, p, waiters)
	heavy := 0
	for _, j := range got[:6] {
		if strings.HasPrefix(j, "h") {
			heavy++
		}
	}
	if heavy != 4 {
		t.Errorf("grant order %v: heavy (weight 2) got %d of the first 6 grants, want 4", got, heavy)
	}
	for _, bad := range []int{0, MaxWeight + 1} {
		if err := p.SetWeight(context.Background(), "heavy", bad); err == nil {
			t.Errorf("SetWeight(%d) = nil, want error", bad)
		}
	}
}

func TestHighPriorityFirstWithStarvationBound(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 5 * time.Second, StarveAfter: 2})[0]
	high := func(j string) queued { return queued{j, Class{Group: "rush", Priority: High}} }
	waiters := group("calm", "n1", "n2")
	waiters = append(waiters, high("h1"), high("h2"), high("h3"), high("h4"), high("h5"))
	got := grantOrder(t, p, waiters)
	want := []string{"h1", "h2", "n1", "h3", "h4", "n2", "h5"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grant order (-want +got):\n%s", diff)
	}
}

func TestPriorityWithinOneGroup(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 5 * time.Second, StarveAfter: 10})[0]
	waiters := group("m", "n1", "n2")
	waiters = append(waiters, queued{"h1", Class{Group: "m", Priority: High}})
	got := grantOrder(t, p, waiters)
	if diff := cmp.Diff([]string{"h1", "n1", "n2"}, got); diff != "" {
		t.Errorf("grant order (-want +got):\n%s", diff)
	}
}

func TestGroupCap(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 3, Lease: 5 * time.Second, GroupCap: 2})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := Class{Group: "a"}
	a1, err := p.AcquireClass(ctx, "a1", a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.AcquireClass(ctx, "a2", a); err != nil {
		t.Fatal(err)
	}
	ch := make(chan acquired, 1)
	go func() {
		s, err := p.AcquireClass(ctx, "a3", a)
		ch <- acquired{s, err}
	}()
	waitFor(t, "a3 queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })
	if s := mustSnapshot(t, p); len(s.Holders) != 2 || s.GroupCap != 2 {
		t.Fatalf("snapshot %+v: want 2 holders with a free slot kept from group a (cap 2)", s)
	}
	// Another group takes the free slot at once.
	b1, err := p.AcquireClass(ctx, "b1", Class{Group: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	// A free slot is still not a's while a holds 2 ...
	time.Sleep(50 * time.Millisecond)
	select {
	case got := <-ch:
		t.Fatalf("a3 granted %v while group a held its cap", got)
	default:
	}
	// ... until a releases one.
	if err := a1.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.err != nil {
		t.Fatal(got.err)
	}
	groups := map[string]GroupState{}
	for _, g := range mustSnapshot(t, p).Groups {
		groups[g.Group] = g
	}
	if groups["a"].Holding != 2 || groups["a"].Waiting != 0 {
		t.Errorf("group a = %+v, want 2 holding, none waiting", groups["a"])
	}

	// Lifting the cap grants a waiter that was held back.
	go func() {
		s, err := p.AcquireClass(ctx, "a4", a)
		ch <- acquired{s, err}
	}()
	waitFor(t, "a4 queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })
	if err := p.SetFairness(ctx, 0, -1); err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.err != nil {
		t.Fatal(got.err)
	}
}

// TestNeverMoreThanNHoldersUnderFairness runs many waiters of several
// groups and both priorities on three replicas, some of which give up
// while waiting and some of which die holding their slot, and checks
// from Redis that N (and the group cap) is never exceeded and that every
// surviving job is served.
func TestNeverMoreThanNHoldersUnderFairness(t *testing.T) {
	const capacity, groupCap, jobs = 4, 2, 150
	pools := replicas(t, 3, Options{Capacity: capacity, GroupCap: groupCap, Lease: time.Second,
		CheckInterval: 100 * time.Millisecond, StarveAfter: 2})
	runJanitors(t, pools...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var live, maxLive, served, gaveUp, died atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, err := pools[0].Snapshot(ctx)
			if err != nil {
				continue
			}
			if len(s.Holders) > capacity {
				t.Errorf("%d holders, want ≤ %d", len(s.Holders), capacity)
			}
			for _, g := range s.Groups {
				if g.Holding > groupCap {
					t.Errorf("group %s holds %d, want ≤ %d", g.Group, g.Holding, groupCap)
				}
			}
		}
	})
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			p := pools[i%len(pools)]
			c := Class{Group: fmt.Sprintf("m-%d", rand.IntN(6))}
			if rand.IntN(4) == 0 {
				c.Priority = High
			}
			actx := ctx
			if i%10 == 3 { // gives up while waiting
				var acancel context.CancelFunc
				actx, acancel = context.WithTimeout(ctx, time.Duration(rand.IntN(50))*time.Millisecond)
				defer acancel()
			}
			s, err := p.AcquireClass(actx, fmt.Sprintf("job-%d", i), c)
			if err != nil {
				if actx.Err() == nil {
					t.Errorf("AcquireClass(job-%d) = %v", i, err)
				}
				gaveUp.Add(1)
				return
			}
			if i%25 == 7 { // dies holding its slot: no renewal, no release
				died.Add(1)
				return
			}
			n := live.Add(1)
			for m := maxLive.Load(); n > m && !maxLive.CompareAndSwap(m, n); m = maxLive.Load() {
			}
			time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
			live.Add(-1)
			if err := s.Release(ctx, Completed, ""); err != nil {
				t.Errorf("Release(job-%d) = %v", i, err)
			}
			served.Add(1)
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	if got := maxLive.Load(); got > capacity {
		t.Errorf("max live holders %d, want ≤ %d", got, capacity)
	}
	if got := served.Load() + gaveUp.Load() + died.Load(); got != jobs {
		t.Errorf("served %d + gave up %d + died %d = %d, want %d", served.Load(), gaveUp.Load(), died.Load(), got, jobs)
	}
	waitFor(t, "dead holders reclaimed", func() bool { return len(mustSnapshot(t, pools[1]).Holders) == 0 })
	s := mustSnapshot(t, pools[1])
	if len(s.Pending) != 0 || len(s.Groups) != 0 {
		t.Errorf("after the run: pending %v, groups %v; want none", s.Pending, s.Groups)
	}
	// The fairness state shrinks back with the queue.
	rdb := pools[0].rdb
	for _, k := range []int{keyQueue, keyPendingMeta, keyHoldMeta, keyActiveHigh, keyActiveNormal, keyVirtualTags, keyGroupHeld} {
		if n, err := rdb.Exists(ctx, pools[0].keys[k]).Result(); err != nil || n != 0 {
			t.Errorf("key %s exists (%d, %v) after the run", pools[0].keys[k], n, err)
		}
	}
	t.Logf("served %d, gave up %d, died %d, max live %d", served.Load(), gaveUp.Load(), died.Load(), maxLive.Load())
}

func TestInvalidClass(t *testing.T) {
	p := replicas(t, 1, Options{})[0]
	for _, c := range []Class{{Group: "a\x00b"}, {Group: strings.Repeat("x", MaxGroupLen+1)}, {Priority: 7}} {
		if _, err := p.AcquireClass(context.Background(), "j", c); err == nil {
			t.Errorf("AcquireClass(%+v) = nil error", c)
		}
	}
}

func TestWeightAndFairnessHandlers(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1})[0]
	put := func(h http.Handler, body string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/", strings.NewReader(body)))
		return rec.Code
	}
	for body, want := range map[string]int{
		`{"group":"m-1","weight":3}`:       http.StatusNoContent,
		`{"group":"m-1","weight":0}`:       http.StatusBadRequest,
		`{"weight":3}`:                     http.StatusBadRequest,
		`{"group":"m-1"}`:                  http.StatusBadRequest,
		`{"group":"m-1","weight":3,"x":1}`: http.StatusBadRequest,
	} {
		if got := put(p.WeightHandler(), body); got != want {
			t.Errorf("PUT weight %s = %d, want %d", body, got, want)
		}
	}
	for body, want := range map[string]int{
		`{"groupCap":2,"starveAfter":5}`: http.StatusNoContent,
		`{"groupCap":-1}`:                http.StatusBadRequest,
		`{"starveAfter":0}`:              http.StatusBadRequest,
		`{}`:                             http.StatusBadRequest,
	} {
		if got := put(p.FairnessHandler(), body); got != want {
			t.Errorf("PUT fairness %s = %d, want %d", body, got, want)
		}
	}
	s := mustSnapshot(t, p)
	if s.GroupCap != 2 || s.StarveAfter != 5 {
		t.Errorf("snapshot cap %d starve %d, want 2 and 5", s.GroupCap, s.StarveAfter)
	}
	if diff := cmp.Diff([]GroupState{{Group: "m-1", Weight: 3}}, s.Groups); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
}
