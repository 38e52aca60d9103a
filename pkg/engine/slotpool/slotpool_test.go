package slotpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// replicas returns n Pools on the same pool name, each with its own Redis
// client (as separate worker replicas have), whose keys are deleted when
// the test ends.
func replicas(t testing.TB, n int, opts Options) []*Pool {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	opts.Name = prefix + ":pool"
	t.Cleanup(func() { testenv.DeletePrefix(context.Background(), rdb, "{"+opts.Name+"}") })
	pools := make([]*Pool, n)
	for i := range pools {
		c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
		t.Cleanup(func() { _ = c.Close() })
		pools[i] = New(c, opts)
	}
	return pools
}

// runJanitors runs every pool's janitor until the test ends.
func runJanitors(t testing.TB, pools ...*Pool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() { _ = p.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func mustAcquire(t testing.TB, p *Pool, job string) *Slot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.Acquire(ctx, job)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", job, err)
	}
	return s
}

func mustSnapshot(t testing.TB, p *Pool) Snapshot {
	t.Helper()
	s, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	return s
}

// waitFor polls cond (a test-side observation, not part of the pool) until
// it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, what, cond)
}

func pendingJobs(s Snapshot) []string {
	out := []string{}
	for _, w := range s.Pending {
		out = append(out, w.JobID)
	}
	return out
}

// acquireAsync starts Acquire in a goroutine; the slot (or error) arrives
// on the returned channel.
type acquired struct {
	slot *Slot
	err  error
}

func acquireAsync(ctx context.Context, p *Pool, job string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		s, err := p.Acquire(ctx, job)
		ch <- acquired{s, err}
	}()
	return ch
}

func TestCapacityNeverExceededAcrossReplicas(t *testing.T) {
	const capacity, jobs = 4, 200
	pools := replicas(t, 3, Options{Capacity: capacity, Lease: 5 * time.Second})
	runJanitors(t, pools...)

	var running, maxRunning, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	for i := range jobs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p := pools[i%len(pools)]
			s, err := p.Acquire(ctx, fmt.Sprintf("job-%d", i))
			if err != nil {
				errs <- err
				return
			}
			notePeak(&maxRunning, running.Add(1))
			time.Sleep(time.Duration(rand.IntN(6)) * time.Millisecond)
			running.Add(-1)
			if err := s.Release(ctx, Completed, "ok"); err != nil {
				errs <- err
				return
			}
			done.Add(1)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("job error: %v", err)
	}
	if got := maxRunning.Load(); got > capacity {
		t.Errorf("max concurrent holders = %d, want <= %d", got, capacity)
	}
	if got := done.Load(); got != jobs {
		t.Errorf("jobs done = %d, want %d", got, jobs)
	}
	s := mustSnapshot(t, pools[0])
	if len(s.Holders) != 0 || len(s.Pending) != 0 {
		t.Errorf("Snapshot() after all jobs = %d holders, %d pending; want 0, 0: %+v", len(s.Holders), len(s.Pending), s.Holders)
	}
	fin, err := pools[1].Finished(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(fin) != jobs {
		t.Errorf("Finished(1000) has %d entries, want %d", len(fin), jobs)
	}
	t.Logf("max concurrent holders %d of %d", maxRunning.Load(), capacity)
}

func TestGrantsInFIFOOrder(t *testing.T) {
	pools := replicas(t, 3, Options{Capacity: 1, Lease: 5 * time.Second})
	ctx := context.Background()
	first := mustAcquire(t, pools[0], "first")

	order := make(chan string, 16)
	var wg sync.WaitGroup
	var want []string
	for i := range 6 {
		job := fmt.Sprintf("job-%d", i)
		want = append(want, job)
		p := pools[i%len(pools)]
		wg.Go(func() {
			s, err := p.Acquire(ctx, job)
			if err != nil {
				t.Errorf("Acquire(%q) = %v", job, err)
				return
			}
			order <- job
			time.Sleep(5 * time.Millisecond)
			if err := s.Release(ctx, Completed, ""); err != nil {
				t.Errorf("Release(%q) = %v", job, err)
			}
		})
		waitFor(t, job+" queued", func() bool { return len(mustSnapshot(t, pools[0]).Pending) == i+1 })
	}
	if diff := cmp.Diff(want, pendingJobs(mustSnapshot(t, pools[1]))); diff != "" {
		t.Errorf("pending queue (-want +got):\n%s", diff)
	}

	// A newcomer racing the release must not jump ahead of the queue.
	want = append(want, "late")
	wg.Go(func() {
		s, err := pools[2].Acquire(ctx, "late")
		if err != nil {
			t.Errorf(`Acquire("late") = %v`, err)
			return
		}
		order <- "late"
		_ = s.Release(ctx, Completed, "")
	})
	if err := first.Release(ctx, Completed, ""); err != nil {
		t.Fatalf("Release(first) = %v", err)
	}
	wg.Wait()
	close(order)
	var got []string
	for j := range order {
		got = append(got, j)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grant order (-want +got):\n%s", diff)
	}
}

func TestCrashedHolderIsReclaimed(t *testing.T) {
	const lease = time.Second
	pools := replicas(t, 2, Options{Capacity: 1, Lease: lease, CheckInterval: 200 * time.Millisecond})
	ctx := context.Background()
	crashed := mustAcquire(t, pools[0], "crashed") // no KeepAlive: the worker "died"
	runJanitors(t, pools[1])

	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, lease+5*time.Second)
	defer cancel()
	next, err := pools[1].Acquire(waitCtx, "next")
	if err != nil {
		t.Fatalf(`Acquire("next") while a crashed holder has the only slot = %v`, err)
	}
	t.Logf("crashed holder's slot granted to the waiter after %v (lease %v)", time.Since(start).Round(time.Millisecond), lease)

	if err := crashed.Release(ctx, Completed, ""); !errors.Is(err, ErrLost) {
		t.Errorf("Release of the reclaimed slot = %v, want ErrLost", err)
	}
	if err := crashed.Renew(ctx); !errors.Is(err, ErrLost) {
		t.Errorf("Renew of the reclaimed slot = %v, want ErrLost", err)
	}
	assertReclaimed(t, pools[0], "crashed")
	if err := next.Release(ctx, Completed, ""); err != nil {
		t.Errorf("Release(next) = %v", err)
	}
}

// assertReclaimed checks that job's lease was reclaimed and recorded as
// Failed "lease expired".
func assertReclaimed(t *testing.T, p *Pool, job string) {
	t.Helper()
	fin, err := p.Finished(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range fin {
		if f.JobID == job {
			found = true
			if f.Outcome != Failed || f.Detail != "lease expired" {
				t.Errorf("finished %s = %v %q, want failed %q", job, f.Outcome, f.Detail, "lease expired")
			}
		}
	}
	if !found {
		t.Errorf("job %s not in the finished stream: %+v", job, fin)
	}
	if got := mustSnapshot(t, p).Reclaimed; got != 1 {
		t.Errorf("Snapshot().Reclaimed = %d, want 1", got)
	}
}

func TestKeepAliveHoldsPastLeaseAndReportsLoss(t *testing.T) {
	const lease = 600 * time.Millisecond
	pools := replicas(t, 1, Options{Capacity: 1, Lease: lease, CheckInterval: 100 * time.Millisecond})
	p := pools[0]
	runJanitors(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := mustAcquire(t, p, "long")
	lost := make(chan struct{})
	go s.KeepAlive(ctx, func() { close(lost) })

	waitCtx, cancelWait := context.WithTimeout(ctx, 3*lease)
	defer cancelWait()
	if _, err := p.Acquire(waitCtx, "waiter"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while a live holder renews = %v, want DeadlineExceeded", err)
	}
	if got := mustSnapshot(t, p); len(got.Holders) != 1 || got.Holders[0].JobID != "long" || len(got.Pending) != 0 {
		t.Errorf("Snapshot() = %+v, want holder long and no waiter", got)
	}

	// Someone frees the slot behind the holder's back: KeepAlive reports it.
	if _, err := p.exec(ctx, cancelOp, s.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(5 * lease):
		t.Fatal("KeepAlive did not call lost after the slot was taken away")
	}

	// After Release, KeepAlive stops quietly: no false alarm.
	s = mustAcquire(t, p, "released")
	falseAlarm := make(chan struct{}, 1)
	keepAliveDone := make(chan struct{})
	go func() {
		defer close(keepAliveDone)
		s.KeepAlive(ctx, func() { falseAlarm <- struct{}{} })
	}()
	if err := s.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-keepAliveDone:
	case <-time.After(5 * lease):
		t.Fatal("KeepAlive still running after Release")
	}
	if len(falseAlarm) != 0 {
		t.Error("KeepAlive called lost after Release")
	}
}

func TestCapacityChangeAtRunTime(t *testing.T) {
	pools := replicas(t, 2, Options{Capacity: 1, Lease: 5 * time.Second})
	p := pools[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := []*Slot{mustAcquire(t, p, "h0")}
	var waiting []<-chan acquired
	for i := range 3 {
		waiting = append(waiting, acquireAsync(ctx, pools[i%2], fmt.Sprintf("w%d", i)))
		waitFor(t, "waiter queued", func() bool { return len(mustSnapshot(t, p).Pending) == i+1 })
	}

	if err := pools[1].SetCapacity(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for i, ch := range waiting[:2] {
		a := <-ch
		if a.err != nil {
			t.Fatalf("waiter %d after capacity increase: %v", i, a.err)
		}
		held = append(held, a.slot)
	}
	s := mustSnapshot(t, p)
	if s.Capacity != 3 || len(s.Holders) != 3 || len(s.Pending) != 1 {
		t.Fatalf("after SetCapacity(3): capacity %d, %d holders, %d pending; want 3, 3, 1", s.Capacity, len(s.Holders), len(s.Pending))
	}

	if err := p.SetCapacity(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i, h := range held[:2] {
		if err := h.Release(ctx, Completed, ""); err != nil {
			t.Fatal(err)
		}
		s := mustSnapshot(t, p)
		if len(s.Holders) != 2-i || len(s.Pending) != 1 {
			t.Fatalf("after SetCapacity(1) and %d releases: %d holders, %d pending; want %d, 1", i+1, len(s.Holders), len(s.Pending), 2-i)
		}
	}
	if err := held[2].Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	a := <-waiting[2]
	if a.err != nil {
		t.Fatalf("last waiter: %v", a.err)
	}
	if err := a.slot.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.SetCapacity(ctx, -1); err == nil {
		t.Error("SetCapacity(-1) = nil, want error")
	}
}

func TestCancelWhilePendingRemovesWaiter(t *testing.T) {
	pools := replicas(t, 2, Options{Capacity: 1, Lease: 5 * time.Second})
	p := pools[0]
	bg := context.Background()
	h := mustAcquire(t, p, "holder")

	ctx, cancel := context.WithCancel(bg)
	ch := acquireAsync(ctx, pools[1], "impatient")
	waitFor(t, "waiter queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })
	cancel()
	if a := <-ch; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("Acquire after cancel = %v, %v; want context.Canceled", a.slot, a.err)
	}
	if s := mustSnapshot(t, p); len(s.Pending) != 0 {
		t.Errorf("pending after cancel = %v, want none", pendingJobs(s))
	}
	if err := h.Release(bg, Completed, ""); err != nil {
		t.Fatal(err)
	}
	if s := mustSnapshot(t, p); len(s.Holders) != 0 {
		t.Errorf("holders after release = %+v, want none (cancelled waiter must not get the slot)", s.Holders)
	}
}

func TestCancelRacingGrantLeaksNoSlot(t *testing.T) {
	pools := replicas(t, 2, Options{Capacity: 1, Lease: 5 * time.Second})
	bg := context.Background()
	for i := range 20 {
		h := mustAcquire(t, pools[0], fmt.Sprintf("h%d", i))
		ctx, cancel := context.WithCancel(bg)
		ch := acquireAsync(ctx, pools[1], fmt.Sprintf("w%d", i))
		waitFor(t, "waiter queued", func() bool { return len(mustSnapshot(t, pools[0]).Pending) == 1 })
		go cancel()
		if err := h.Release(bg, Completed, ""); err != nil {
			t.Fatal(err)
		}
		if a := <-ch; a.err == nil {
			if err := a.slot.Release(bg, Completed, ""); err != nil {
				t.Fatalf("round %d: Release of the granted slot = %v", i, err)
			}
		}
		if s := mustSnapshot(t, pools[0]); len(s.Holders) != 0 || len(s.Pending) != 0 {
			t.Fatalf("round %d: %d holders, %d pending; want 0, 0", i, len(s.Holders), len(s.Pending))
		}
	}
}

func TestStaleWaiterIsDropped(t *testing.T) {
	const lease = 500 * time.Millisecond
	pools := replicas(t, 1, Options{Capacity: 1, Lease: lease, CheckInterval: 100 * time.Millisecond})
	p := pools[0]
	ctx := context.Background()
	h := mustAcquire(t, p, "holder")
	go h.KeepAlive(t.Context(), nil)
	// A waiter that enqueued and then died: it never renews its heartbeat.
	if _, err := p.exec(ctx, enqueueOp, "dead-token", "dead", lease.Milliseconds(), lease.Milliseconds(), "2", ""); err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(ctx, p, "alive")
	waitFor(t, "both waiters queued", func() bool { return len(mustSnapshot(t, p).Pending) == 2 })
	runJanitors(t, p)
	waitFor(t, "dead waiter dropped", func() bool {
		return cmp.Equal(pendingJobs(mustSnapshot(t, p)), []string{"alive"})
	})
	if err := h.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatalf(`Acquire("alive") = %v`, a.err)
	}
	_ = a.slot.Release(ctx, Completed, "")
}

func TestSnapshotFinishedHandlerAndMetrics(t *testing.T) {
	const lease = 5 * time.Second
	reg := prometheus.NewRegistry()
	pools := replicas(t, 1, Options{Capacity: 2, Lease: lease, Registerer: reg})
	p := pools[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := mustAcquire(t, p, "a"), mustAcquire(t, p, "b")
	ch := acquireAsync(ctx, p, "c")
	waitFor(t, "c queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })

	s := mustSnapshot(t, p)
	if s.Capacity != 2 {
		t.Errorf("Capacity = %d, want 2", s.Capacity)
	}
	holders := map[string]Holder{}
	for _, h := range s.Holders {
		holders[h.JobID] = h
	}
	for _, slot := range []*Slot{a, b} {
		h, ok := holders[slot.JobID]
		switch {
		case !ok:
			t.Errorf("holder %s missing from %+v", slot.JobID, s.Holders)
		case h.Token != slot.Token || !h.Since.Equal(slot.Since):
			t.Errorf("holder %s = %+v, want token %s since %v", slot.JobID, h, slot.Token, slot.Since)
		case h.LeaseUntil.Sub(h.Since) < lease-time.Second || h.LeaseUntil.Sub(h.Since) > lease:
			t.Errorf("holder %s lease until %v, since %v: want about %v later", slot.JobID, h.LeaseUntil, h.Since, lease)
		}
	}
	if diff := cmp.Diff([]string{"c"}, pendingJobs(s)); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	for name, want := range map[string]float64{"capacity": 2, "in_use": 2, "waiting": 1} {
		if got := gathered(t, reg, "orderflow_slotpool_"+name).GetGauge().GetValue(); got != want {
			t.Errorf("metric %s = %v, want %v", name, got, want)
		}
	}

	if err := a.Release(ctx, Completed, "shipment SH-1"); err != nil {
		t.Fatal(err)
	}
	got := <-ch
	if got.err != nil {
		t.Fatalf(`Acquire("c") = %v`, got.err)
	}
	if err := b.Release(ctx, Failed, "rejected: out of stock"); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, Failed, "again"); !errors.Is(err, ErrLost) {
		t.Errorf("second Release = %v, want ErrLost", err)
	}
	if err := got.slot.Release(ctx, Outcome(9), ""); err == nil {
		t.Error("Release with an invalid outcome = nil, want error")
	}

	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slots?finished=5", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /slots = %d %s", rec.Code, rec.Body)
	}
	var body struct {
		Pool     string `json:"pool"`
		Capacity int    `json:"capacity"`
		InUse    int    `json:"inUse"`
		Waiting  int    `json:"waiting"`
		Holders  []struct {
			JobID string `json:"jobId"`
			Token string `json:"token"`
		} `json:"holders"`
		Pending  []Waiter `json:"pending"`
		Finished []struct {
			JobID   string `json:"jobId"`
			Outcome string `json:"outcome"`
			Detail  string `json:"detail"`
		} `json:"finished"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET /slots body %s: %v", rec.Body, err)
	}
	type fin struct{ JobID, Outcome, Detail string }
	var finished []fin
	for _, f := range body.Finished {
		finished = append(finished, fin{f.JobID, f.Outcome, f.Detail})
	}
	if diff := cmp.Diff([]fin{{"b", "failed", "rejected: out of stock"}, {"a", "completed", "shipment SH-1"}}, finished); diff != "" {
		t.Errorf("GET /slots finished (-want +got):\n%s", diff)
	}
	if body.Pool != p.Name() || body.Capacity != 2 || body.InUse != 1 || body.Waiting != 0 ||
		len(body.Holders) != 1 || body.Holders[0].JobID != "c" || body.Holders[0].Token != got.slot.Token {
		t.Errorf("GET /slots = %s, want pool %s, capacity 2, one holder c", rec.Body, p.Name())
	}
	if n := gathered(t, reg, "orderflow_slotpool_wait_seconds").GetHistogram().GetSampleCount(); n != 3 {
		t.Errorf("wait histogram count = %d, want 3 (a, b, c)", n)
	}

	rec = httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slots?finished=x", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("GET /slots?finished=x = %d, want 400", rec.Code)
	}
}

// gathered returns the single series of metric name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0]
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return nil
}

func TestJanitorRunsOnItsClock(t *testing.T) {
	const lease = 300 * time.Millisecond
	fake := clock.NewFake(time.Now())
	pools := replicas(t, 1, Options{Capacity: 1, Lease: lease, CheckInterval: time.Second, Clock: fake})
	p := pools[0]
	mustAcquire(t, p, "crashed")
	runJanitors(t, p)

	time.Sleep(2 * lease) // the lease runs out in Redis time, but nobody looks
	if s := mustSnapshot(t, p); len(s.Holders) != 1 || s.Reclaimed != 0 {
		t.Fatalf("before the janitor's tick: %d holders, %d reclaimed; want 1, 0", len(s.Holders), s.Reclaimed)
	}
	fake.Advance(time.Second)
	waitFor(t, "janitor reclaims the lease", func() bool {
		s := mustSnapshot(t, p)
		return len(s.Holders) == 0 && s.Reclaimed == 1
	})
}

// TestSnapshotNamesTheReplicas has two replicas name themselves: the
// snapshot shows which one holds the slot and which one waits, and the
// holder's token still releases and evicts as before.
func TestSnapshotNamesTheReplicas(t *testing.T) {
	pools := replicas(t, 2, Options{Capacity: 1, Lease: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := New(pools[0].rdb, Options{Name: pools[0].name, Replica: "worker-a"})
	b := New(pools[1].rdb, Options{Name: pools[1].name, Replica: "worker b~1/x"})
	held := mustAcquire(t, a, "job-a")
	ch := acquireAsync(ctx, b, "job-b")
	waitFor(t, "job-b queued", func() bool { return len(mustSnapshot(t, a).Pending) == 1 })
	s := mustSnapshot(t, b)
	if len(s.Holders) != 1 || s.Holders[0].Replica != "worker-a" || s.Holders[0].Token != held.Token {
		t.Errorf("holders = %+v, want job-a held by worker-a", s.Holders)
	}
	if len(s.Pending) != 1 || s.Pending[0].Replica != "workerb1x" {
		t.Errorf("pending = %+v, want job-b waiting at workerb1x (the name's characters a token may carry)", s.Pending)
	}
	if err := b.Evict(ctx, held.Token, "known dead"); err != nil {
		t.Fatalf("Evict(%s) = %v", held.Token, err)
	}
	got := <-ch
	if got.err != nil {
		t.Fatalf(`Acquire("job-b") = %v`, got.err)
	}
	if err := got.slot.Release(ctx, Completed, ""); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// notePeak raises peak to n if n is higher: the most holders seen at once.
func notePeak(peak *atomic.Int64, n int64) {
	for {
		m := peak.Load()
		if n <= m || peak.CompareAndSwap(m, n) {
			return
		}
	}
}
