package delayq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/testkit/jittertest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// testQueue returns a queue on the shared Redis under a fresh name whose
// keys are deleted when the test ends, and that name.
func testQueue(t *testing.T, opts Options) (*Queue, *redis.Client, string) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	if opts.Name == "" {
		opts.Name = prefix
	}
	t.Cleanup(func() { testenv.DeletePrefix(context.Background(), rdb, "{"+opts.Name) })
	return New(rdb, opts), rdb, opts.Name
}

// newClient returns another client of the shared Redis, closed at the end.
func newClient(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// start runs q with h until the returned stop is called (or the test ends).
func start(t *testing.T, q *Queue, h func(context.Context, Job) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run() = %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("Run did not return within 10s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// fired records handler calls.
type fired struct {
	at  time.Time
	job Job
}

// recv waits for the next value on c.
func recv[T any](t *testing.T, c <-chan T, within time.Duration) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(within):
		var zero T
		t.Fatalf("nothing received within %v", within)
		return zero
	}
}

// none asserts nothing arrives on c for d.
func none[T any](t *testing.T, c <-chan T, d time.Duration) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("received %+v, want nothing yet", v)
	case <-time.After(d):
	}
}

func TestFiresOnTimeNeverEarly(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	ctx := context.Background()
	const n = 50
	got := make(chan fired, n)
	start(t, q, func(_ context.Context, j Job) error {
		got <- fired{at: time.Now(), job: j}
		return nil
	})
	due := make(map[string]time.Time, n)
	base := time.Now()
	for i := range n {
		id := fmt.Sprintf("job-%d", i)
		due[id] = base.Add(time.Duration(10+rand.IntN(190)) * time.Millisecond)
		if err := q.Schedule(ctx, id, due[id], []byte("p"+id)); err != nil {
			t.Fatal(err)
		}
	}
	var worst time.Duration
	for range n {
		f := recv(t, got, 5*time.Second)
		want := due[f.job.ID]
		if f.at.Before(want) {
			t.Errorf("job %s fired at %v, %v before its due time", f.job.ID, f.at, want.Sub(f.at))
		}
		if string(f.job.Payload) != "p"+f.job.ID {
			t.Errorf("job %s payload = %q, want %q", f.job.ID, f.job.Payload, "p"+f.job.ID)
		}
		if f.job.Attempt != 0 {
			t.Errorf("job %s attempt = %d, want 0", f.job.ID, f.job.Attempt)
		}
		worst = max(worst, f.at.Sub(want))
		delete(due, f.job.ID)
	}
	t.Logf("worst lateness of %d jobs: %v", n, worst)
	if l, err := q.Len(ctx); err != nil || l != 0 {
		t.Errorf("Len() = %d, %v, want 0, nil", l, err)
	}
}

func TestEarlierJobWakesSleepingReplica(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	ctx := context.Background()
	got := make(chan fired, 2)
	base := time.Now()
	if err := q.Schedule(ctx, "late", base.Add(3*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	start(t, q, func(_ context.Context, j Job) error {
		got <- fired{at: time.Now(), job: j}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // the replica now sleeps until "late"
	early := time.Now().Add(100 * time.Millisecond)
	if err := q.Schedule(ctx, "early", early, nil); err != nil {
		t.Fatal(err)
	}
	f := recv(t, got, 5*time.Second)
	if f.job.ID != "early" {
		t.Fatalf("first fired = %q, want %q", f.job.ID, "early")
	}
	if f.at.Before(early) || f.at.After(base.Add(2*time.Second)) {
		t.Errorf("early job fired %v after its due time, want between 0 and the later job's due time", f.at.Sub(early))
	}
	t.Logf("early job lateness: %v", f.at.Sub(early))
}

func TestTwoReplicasRunEachJobOnce(t *testing.T) {
	q1, _, name := testQueue(t, Options{})
	q2 := New(newClient(t), Options{Name: name})
	ctx := context.Background()
	const n = 2000
	var mu sync.Mutex
	count := make(map[string]int, n)
	var byReplica [2]int
	all := make(chan struct{})
	handler := func(replica int) func(context.Context, Job) error {
		return func(_ context.Context, j Job) error {
			mu.Lock()
			defer mu.Unlock()
			count[j.ID]++
			byReplica[replica]++
			if byReplica[0]+byReplica[1] == n {
				close(all)
			}
			return nil
		}
	}
	start(t, q1, handler(0))
	start(t, q2, handler(1))
	base := time.Now().Add(100 * time.Millisecond)
	for i := range n {
		due := base.Add(time.Duration(i) * time.Second / n)
		if err := q1.Schedule(ctx, "job-"+strconv.Itoa(i), due, nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		mu.Lock()
		t.Fatalf("handled %d of %d jobs", len(count), n)
	}
	time.Sleep(200 * time.Millisecond) // let any duplicate show up
	mu.Lock()
	defer mu.Unlock()
	for id, c := range count {
		if c != 1 {
			t.Errorf("job %s handled %d times, want 1", id, c)
		}
	}
	if len(count) != n {
		t.Errorf("handled %d distinct jobs, want %d", len(count), n)
	}
	t.Logf("replica 1 ran %d, replica 2 ran %d", byReplica[0], byReplica[1])
}

func TestAbandonedReplicaJobRunsAgainAfterLease(t *testing.T) {
	const lease = 400 * time.Millisecond
	_, _, name := testQueue(t, Options{})
	ctx := context.Background()
	rdbA := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	qa := New(rdbA, Options{Name: name, Lease: lease})
	qb := New(newClient(t), Options{Name: name, Lease: lease})

	startedA, releaseA := make(chan Job, 1), make(chan struct{})
	stopA := start(t, qa, func(_ context.Context, j Job) error {
		startedA <- j
		<-releaseA // a hung replica: ignores its context
		return nil
	})
	if err := qb.Schedule(ctx, "pay-1", time.Now(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if j := recv(t, startedA, 5*time.Second); j.Attempt != 0 {
		t.Errorf("first attempt = %d, want 0", j.Attempt)
	}
	// Replica A loses Redis: it can neither renew its lease nor finish.
	_ = rdbA.Close()
	claimedAt := time.Now()

	gotB := make(chan fired, 1)
	start(t, qb, func(_ context.Context, j Job) error {
		gotB <- fired{at: time.Now(), job: j}
		return nil
	})
	f := recv(t, gotB, 10*time.Second)
	if f.job.ID != "pay-1" || f.job.Attempt != 1 || string(f.job.Payload) != "x" {
		t.Errorf("replica B ran %+v, want pay-1 attempt 1 payload x", f.job)
	}
	if f.at.Before(claimedAt.Add(lease / 2)) {
		t.Errorf("replica B ran the job %v after A was abandoned, want after A's lease", f.at.Sub(claimedAt))
	}
	close(releaseA)
	stopA()
	time.Sleep(100 * time.Millisecond)
	if l, err := qb.Len(ctx); err != nil || l != 0 {
		t.Errorf("Len() = %d, %v, want 0, nil", l, err)
	}
}

func TestShutdownHandsRunningJobToAnotherReplica(t *testing.T) {
	qa, _, name := testQueue(t, Options{})
	qb := New(newClient(t), Options{Name: name})
	ctx := context.Background()
	startedA := make(chan Job, 1)
	stopA := start(t, qa, func(ctx context.Context, j Job) error {
		startedA <- j
		<-ctx.Done()
		return ctx.Err()
	})
	if err := qa.Schedule(ctx, "pay-2", time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	recv(t, startedA, 5*time.Second)
	stopA()
	gotB := make(chan Job, 1)
	start(t, qb, func(_ context.Context, j Job) error {
		gotB <- j
		return nil
	})
	// The lease is 30 s: a prompt run by B shows A put the job back.
	j := recv(t, gotB, 5*time.Second)
	if j.ID != "pay-2" || j.Attempt != 0 {
		t.Errorf("replica B ran %+v, want pay-2 attempt 0", j)
	}
}

// TestKilledReplicaChild is the replica that TestKill9ReplicaJobRunsAgain
// starts as a subprocess and kills.
func TestKilledReplicaChild(t *testing.T) {
	name := os.Getenv("DELAYQ_CHILD_QUEUE")
	if name == "" {
		t.Skip("subprocess of TestKill9ReplicaJobRunsAgain")
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	q := New(rdb, Options{Name: name, Lease: 500 * time.Millisecond})
	_ = q.Run(context.Background(), func(ctx context.Context, j Job) error {
		rdb.Set(ctx, "{"+name+"}:test:child-started", j.ID, time.Minute)
		select {} // until killed
	})
}

func TestKill9ReplicaJobRunsAgain(t *testing.T) {
	q, rdb, name := testQueue(t, Options{})
	ctx := context.Background()
	if err := q.Schedule(ctx, "pay-3", time.Now(), []byte("kill")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledReplicaChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DELAYQ_CHILD_QUEUE="+name)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for rdb.Get(ctx, "{"+name+"}:test:child-started").Val() != "pay-3" {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("child replica did not start the job")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	got := make(chan Job, 1)
	start(t, q, func(_ context.Context, j Job) error {
		got <- j
		return nil
	})
	j := recv(t, got, 10*time.Second)
	if j.ID != "pay-3" || j.Attempt != 1 || string(j.Payload) != "kill" {
		t.Errorf("ran %+v, want pay-3 attempt 1 payload kill", j)
	}
}

func TestCancelAndReschedule(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	ctx := context.Background()
	now := time.Now()
	for _, s := range []struct {
		id  string
		due time.Duration
		p   string
	}{
		{"cancelled", 300 * time.Millisecond, "c"},
		{"moved-earlier", time.Hour, "old"},
		{"moved-earlier", 150 * time.Millisecond, "new"},
		{"moved-later", 100 * time.Millisecond, "a"},
		{"moved-later", 600 * time.Millisecond, "b"},
	} {
		if err := q.Schedule(ctx, s.id, now.Add(s.due), []byte(s.p)); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := q.Len(ctx); err != nil || l != 3 {
		t.Errorf("Len() = %d, %v, want 3, nil", l, err)
	}
	for _, c := range []struct {
		id   string
		want bool
	}{{"cancelled", true}, {"cancelled", false}, {"never-scheduled", false}} {
		if got, err := q.Cancel(ctx, c.id); err != nil || got != c.want {
			t.Errorf("Cancel(%q) = %v, %v, want %v, nil", c.id, got, err, c.want)
		}
	}
	got := make(chan fired, 4)
	start(t, q, func(_ context.Context, j Job) error {
		got <- fired{at: time.Now(), job: j}
		return nil
	})
	want := []struct {
		id, payload string
		due         time.Duration
	}{{"moved-earlier", "new", 150 * time.Millisecond}, {"moved-later", "b", 600 * time.Millisecond}}
	for _, w := range want {
		f := recv(t, got, 5*time.Second)
		if f.job.ID != w.id || string(f.job.Payload) != w.payload {
			t.Errorf("fired %s/%q, want %s/%q", f.job.ID, f.job.Payload, w.id, w.payload)
		}
		if f.at.Before(now.Add(w.due)) {
			t.Errorf("%s fired %v early", w.id, now.Add(w.due).Sub(f.at))
		}
	}
	none(t, got, 500*time.Millisecond)
	if _, err := q.Cancel(ctx, ""); !errors.Is(err, ErrEmptyID) {
		t.Errorf("Cancel(\"\") error = %v, want ErrEmptyID", err)
	}
}

func TestRescheduleDuringRunSurvives(t *testing.T) {
	tests := []struct {
		name string
		// during runs inside the first attempt's handler.
		during func(t *testing.T, q *Queue) error
		// deferred: the new due time passes while the first attempt runs.
		deferred bool
	}{
		{name: "handler reschedules and succeeds", during: func(t *testing.T, q *Queue) error {
			return q.Schedule(context.Background(), "job", time.Now().Add(50*time.Millisecond), []byte("v2"))
		}},
		{name: "rescheduled then handler fails", during: func(t *testing.T, q *Queue) error {
			if err := q.Schedule(context.Background(), "job", time.Now().Add(50*time.Millisecond), []byte("v2")); err != nil {
				t.Error(err)
			}
			return errors.New("provider down")
		}},
		{name: "new due time passes while running", deferred: true, during: func(t *testing.T, q *Queue) error {
			if err := q.Schedule(context.Background(), "job", time.Now(), []byte("v2")); err != nil {
				t.Error(err)
			}
			time.Sleep(300 * time.Millisecond) // the firing comes due meanwhile
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, _, _ := testQueue(t, Options{})
			ctx := context.Background()
			type run struct {
				job        Job
				start, end time.Time
			}
			got := make(chan run, 4)
			var calls int
			var mu sync.Mutex
			start(t, q, func(_ context.Context, j Job) error {
				mu.Lock()
				calls++
				first := calls == 1
				mu.Unlock()
				r := run{job: j, start: time.Now()}
				var err error
				if first {
					err = tc.during(t, q)
				}
				r.end = time.Now()
				got <- r
				return err
			})
			if err := q.Schedule(ctx, "job", time.Now(), []byte("v1")); err != nil {
				t.Fatal(err)
			}
			r1 := recv(t, got, 5*time.Second)
			r2 := recv(t, got, 5*time.Second)
			if string(r1.job.Payload) != "v1" || string(r2.job.Payload) != "v2" || r2.job.Attempt != 0 {
				t.Errorf("runs = %q then %q attempt %d, want v1 then v2 attempt 0", r1.job.Payload, r2.job.Payload, r2.job.Attempt)
			}
			if r2.start.Before(r1.end) {
				t.Errorf("second run started %v before the first ended", r1.end.Sub(r2.start))
			}
			none(t, got, 300*time.Millisecond)
			if l, err := q.Len(ctx); err != nil || l != 0 {
				t.Errorf("Len() = %d, %v, want 0, nil", l, err)
			}
		})
	}
}

// fakeStart is the fake clock's start, a round second.
var fakeStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestHandlerErrorRetriedWithBackoff(t *testing.T) {
	fake := clock.NewFake(fakeStart)
	reg := prometheus.NewRegistry()
	q, _, _ := testQueue(t, Options{Clock: fake, Registerer: reg})
	ctx := context.Background()
	got := make(chan Job, 4)
	start(t, q, func(_ context.Context, j Job) error {
		got <- j
		if j.Attempt < 2 {
			return fmt.Errorf("attempt %d: provider down", j.Attempt)
		}
		return nil
	})
	if err := q.Schedule(ctx, "q", fakeStart, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if j := recv(t, got, 5*time.Second); j.Attempt != 0 {
		t.Fatalf("attempt = %d, want 0", j.Attempt)
	}
	// Retries after a jittered 1 s, then 2 s: each due within [d/2, d].
	for attempt, d := range []time.Duration{time.Second, 2 * time.Second} {
		failed := fake.Now()
		wait := retryDue(t, q, "q", attempt+1).Sub(failed)
		if wait < d/2 || wait > d {
			t.Fatalf("retry %d due %v after the failure, want within [%v, %v]", attempt+1, wait, d/2, d)
		}
		fake.Advance(wait - time.Millisecond)
		none(t, got, 100*time.Millisecond)
		fake.Advance(time.Millisecond)
		if j := recv(t, got, 5*time.Second); j.Attempt != attempt+1 || string(j.Payload) != "x" {
			t.Fatalf("retry = %+v, want attempt %d payload x", j, attempt+1)
		}
	}
	waitLen(t, q, 0)
	fake.Advance(time.Hour)
	none(t, got, 100*time.Millisecond)
	if n := testutil.ToFloat64(q.m.retries); n != 2 {
		t.Errorf("orderflow_delayq_retries_total = %v, want 2", n)
	}
	if n := testutil.ToFloat64(q.m.fired); n != 3 {
		t.Errorf("orderflow_delayq_fired_total = %v, want 3", n)
	}
}

// retryDue waits until job id is pending for attempt (its handler
// finished asynchronously) and returns when that retry is due.
func retryDue(t *testing.T, q *Queue, id string, attempt int) time.Time {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := q.Lookup(context.Background(), id)
		if err == nil && st.Attempt == attempt && !st.Running && !st.Due.IsZero() {
			return st.Due
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lookup(%q) = %+v, %v, want attempt %d pending", id, st, err, attempt)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRetryDelayIsJitteredWithinItsBackoff: the delay before a retry is
// drawn from [d/2, d] of the 1 s doubling backoff (capped at 5 min), not
// d itself, so replicas whose handlers failed together do not retry
// together.
func TestRetryDelayIsJitteredWithinItsBackoff(t *testing.T) {
	for attempt := range 12 {
		d := min(time.Second<<attempt, maxBackoff)
		jittertest.Spread(t, fmt.Sprintf("retryDelay(%d)", attempt), d/2, d, func() time.Duration { return retryDelay(attempt) })
	}
}

// TestReplicasRetryAFailureAtSpreadTimes: jobs that fail at the same
// instant on two replicas (the provider down for all of them) are
// retried at times spread over [0.5 s, 1 s] after the failure, not all
// at once.
func TestReplicasRetryAFailureAtSpreadTimes(t *testing.T) {
	fake := clock.NewFake(fakeStart)
	a, _, name := testQueue(t, Options{Clock: fake})
	b := New(newClient(t), Options{Name: name, Clock: fake})
	fail := func(context.Context, Job) error { return errors.New("provider down") }
	start(t, a, fail)
	start(t, b, fail)
	ctx := context.Background()
	const n = 20
	for i := range n {
		if err := a.Schedule(ctx, fmt.Sprintf("j%d", i), fakeStart, nil); err != nil {
			t.Fatal(err)
		}
	}
	dues := map[time.Time]bool{}
	for i := range n {
		due := retryDue(t, a, fmt.Sprintf("j%d", i), 1)
		if wait := due.Sub(fakeStart); wait < time.Second/2 || wait > time.Second {
			t.Errorf("j%d retried %v after the failure, want within [0.5s, 1s]", i, wait)
		}
		dues[due] = true
	}
	if len(dues) < n/4 {
		t.Errorf("%d jobs that failed together are retried at %d distinct times, want them spread", n, len(dues))
	}
}

// waitLen waits until q.Len is want (handlers finish asynchronously).
func waitLen(t *testing.T, q *Queue, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := q.Len(context.Background())
		if err == nil && l == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Len() = %d, %v, want %d", l, err, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFakeClockAdvanceDrivesFiring(t *testing.T) {
	fake := clock.NewFake(fakeStart)
	q, _, _ := testQueue(t, Options{Clock: fake})
	ctx := context.Background()
	steps := []time.Duration{5 * time.Second, 30 * time.Second, time.Minute, 3 * time.Minute,
		5 * time.Minute, 10 * time.Minute, 30 * time.Minute}
	for _, s := range steps {
		if err := q.Schedule(ctx, "q-"+s.String(), fakeStart.Add(s), []byte(s.String())); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan Job, len(steps))
	start(t, q, func(_ context.Context, j Job) error {
		got <- j
		return nil
	})
	none(t, got, 100*time.Millisecond)
	prev := time.Duration(0)
	for _, s := range steps {
		fake.Advance(s - prev - time.Millisecond)
		none(t, got, 30*time.Millisecond)
		fake.Advance(time.Millisecond)
		j := recv(t, got, 5*time.Second)
		if j.ID != "q-"+s.String() || !j.Due.Equal(fakeStart.Add(s)) {
			t.Errorf("after %v fired %s due %v, want q-%v due %v", s, j.ID, j.Due, s, fakeStart.Add(s))
		}
		prev = s
	}
	waitLen(t, q, 0)
}

func TestLongHandlerKeepsItsLease(t *testing.T) {
	const lease = 300 * time.Millisecond
	qa, _, name := testQueue(t, Options{Lease: lease})
	qb := New(newClient(t), Options{Name: name, Lease: lease})
	ctx := context.Background()
	runs := make(chan Job, 4)
	handler := func(ctx context.Context, j Job) error {
		runs <- j
		select {
		case <-time.After(4 * lease): // several leases long: renewals keep it
			return nil
		case <-ctx.Done():
			t.Errorf("handler of %s lost its lease: %v", j.ID, context.Cause(ctx))
			return ctx.Err()
		}
	}
	start(t, qa, handler)
	start(t, qb, handler)
	if err := qa.Schedule(ctx, "long-1", time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	if j := recv(t, runs, 5*time.Second); j.ID != "long-1" || j.Attempt != 0 {
		t.Errorf("first run %+v, want long-1 attempt 0", j)
	}
	none(t, runs, 6*lease)
}
