package reconcile_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
	"github.com/orderflow/orderflow/services/reconciler/internal/reconcile"
)

var (
	platformOnce sync.Once
	platformKey  *rsa.PrivateKey
)

// testPlatformKey is a small platform key shared by the tests (signing
// with it is cheap).
func testPlatformKey(t testing.TB) *rsa.PrivateKey {
	platformOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 1024)
		if err != nil {
			t.Fatal(err)
		}
		platformKey = k
	})
	return platformKey
}

// manualJobs is a deterministic stand-in for the delayed-job queue: jobs
// fire only when the test calls runUntil. It keeps the tests of the
// reconciliation rules independent of the queue's own timing; the
// integration test runs the real queue.
type manualJobs struct {
	mu   sync.Mutex
	due  map[string]time.Time
	runs map[string]int
	// beforeSchedule, when set, runs at the start of each Schedule.
	beforeSchedule func()
	// failSchedule fails that many Schedule calls from now on.
	failSchedule int
}

func newManualJobs() *manualJobs {
	return &manualJobs{due: map[string]time.Time{}, runs: map[string]int{}}
}

func (m *manualJobs) Schedule(ctx context.Context, id string, due time.Time, _ []byte) error {
	if m.beforeSchedule != nil {
		m.beforeSchedule()
	}
	// Like the real queue, a call whose context has ended does nothing.
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSchedule > 0 {
		m.failSchedule--
		return errors.New("queue unreachable")
	}
	m.due[id] = due
	return nil
}

func (m *manualJobs) Cancel(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.due[id]
	delete(m.due, id)
	return ok, nil
}

func (m *manualJobs) pending(id string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.due[id]
	return d, ok
}

type firing struct {
	id  string
	due time.Time
}

// takeDue removes and returns the jobs due at or before t, and the
// earliest due time of those left (zero when none).
func (m *manualJobs) takeDue(t time.Time) ([]firing, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var fs []firing
	var next time.Time
	for id, d := range m.due {
		if !d.After(t) {
			fs = append(fs, firing{id, d})
			delete(m.due, id)
			m.runs[id]++
		} else if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].id < fs[j].id })
	return fs, next
}

type harness struct {
	t        *testing.T
	clock    *clock.Fake
	sim      *paysim.Sim
	simURL   string
	client   *wechatpay.Client
	jobs     *manualJobs
	svc      *reconcile.Service
	store    *paystore.Store
	schedule []time.Duration
	// parallel fires the due jobs of one instant concurrently.
	parallel bool
}

type harnessOpts struct {
	minCloseAge time.Duration
	notifyURL   string
	// publicKeyID runs the simulator in the WeChat Pay public-key mode,
	// the client configured with that key (no certificate fetch).
	publicKeyID string
	// resentStep sends the first script call recording a NOTPAY query to
	// Redis twice, as the Redis client does when the reply to a call
	// that Redis applied is lost (connection reset) and it sends the
	// call again.
	resentStep bool
	// hook is added to the Redis client.
	hook redis.Hook
}

// resendOnce sends the first script call with an argument containing
// marker twice; the caller sees the second reply.
type resendOnce struct {
	marker string
	done   bool
	mu     sync.Mutex
}

func (r *resendOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *resendOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (r *resendOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if r.take(cmd) {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (r *resendOnce) take(cmd redis.Cmder) bool {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return false
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, r.marker) {
			r.done = true
			return true
		}
	}
	return false
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	if o.resentStep {
		rdb.AddHook(&resendOnce{marker: "|" + paystore.ActionQuery + "|" + wechatpay.TradeStateNotPay})
	}
	if o.hook != nil {
		rdb.AddHook(o.hook)
	}
	h := &harness{t: t, clock: clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), jobs: newManualJobs(), schedule: reconcile.DefaultSchedule}
	h.sim = paysim.New(paysim.Options{
		MchID: "1900000001", AppID: "wxapp", APIv3Key: []byte(wechatpay.DevAPIv3Key),
		PlatformKey: testPlatformKey(t), MerchantPub: &wechatpay.DevMerchantKey().PublicKey,
		NotifyURL: o.notifyURL, MinCloseAge: o.minCloseAge, Clock: h.clock, PublicKeyID: o.publicKeyID,
	})
	srv := httptest.NewServer(h.sim.Handler())
	t.Cleanup(srv.Close)
	h.simURL = srv.URL
	var keys wechatpay.KeySource
	if o.publicKeyID != "" {
		keys = wechatpay.StaticKeys{o.publicKeyID: &testPlatformKey(t).PublicKey}
	}
	h.client = wechatpay.NewClient(wechatpay.ClientOptions{
		BaseURL: srv.URL, MchID: "1900000001", AppID: "wxapp", Key: wechatpay.DevMerchantKey(),
		APIv3Key: []byte(wechatpay.DevAPIv3Key), Clock: h.clock, Keys: keys,
	})
	h.store = paystore.New(rdb, prefix, 24*time.Hour)
	h.svc = reconcile.New(h.store, h.client, h.jobs, reconcile.Options{
		Schedule: h.schedule, RetryBase: 2 * time.Second, RetryMax: 20 * time.Second,
		NotifyURL: "http://merchant/notify", Clock: h.clock,
	})
	return h
}

// runFor moves the fake clock forward by d, firing every job when it is
// due (jobs scheduled by a firing fire in turn).
func (h *harness) runFor(d time.Duration) {
	h.t.Helper()
	end := h.clock.Now().Add(d)
	for {
		ids, next := h.jobs.takeDue(h.clock.Now())
		if len(ids) > 0 {
			h.fire(ids)
			continue
		}
		if next.IsZero() || next.After(end) {
			h.clock.Set(end)
			return
		}
		h.clock.Set(next)
	}
}

func (h *harness) fire(fs []firing) {
	h.t.Helper()
	if !h.parallel {
		for _, f := range fs {
			if err := h.svc.Check(context.Background(), f.id, f.due); err != nil {
				h.t.Errorf("Check(%s) = %v", f.id, err)
			}
		}
		return
	}
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(func() {
			if err := h.svc.Check(context.Background(), f.id, f.due); err != nil {
				h.t.Errorf("Check(%s) = %v", f.id, err)
			}
		})
	}
	wg.Wait()
}

// tn is the out_trade_no of member m1's order code (the harness's
// payments are m1's).
func tn(code string) string { return wechatpay.OutTradeNo("m1", code) }

func (h *harness) create(code string, amount int64) paystore.Payment {
	h.t.Helper()
	p, err := h.svc.Create(context.Background(), "m1", code, amount, "order "+code)
	if err != nil {
		h.t.Fatalf("Create(%s) = %v", code, err)
	}
	return p
}

func (h *harness) get(code string) paystore.Payment {
	h.t.Helper()
	p, err := h.svc.Get(context.Background(), "m1", code)
	if err != nil {
		h.t.Fatalf("Get(%s) = %v", code, err)
	}
	return p
}

// summary is an attempt without its time, for comparisons.
type summary struct{ Action, State string }

func summarise(as []paystore.Attempt) []summary {
	out := make([]summary, len(as))
	for i, a := range as {
		out[i] = summary{a.Action, a.TradeState}
	}
	return out
}

func repeat(s summary, n int) []summary {
	out := make([]summary, n)
	for i := range out {
		out[i] = s
	}
	return out
}
