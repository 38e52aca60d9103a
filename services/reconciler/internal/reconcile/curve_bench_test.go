package reconcile_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/delayq"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
	"github.com/orderflow/orderflow/services/reconciler/internal/reconcile"
)

// trackedCost is the reconciler's cost with n payments tracked: Redis
// bytes per tracked payment, the process's heap in use and RSS while
// checking, and the rate and durations of a stream of checks.
type trackedCost struct {
	tracked        int
	bytesPerPay    float64
	heapInUse, rss uint64
	checks         int
	elapsed        time.Duration
	durations      []time.Duration
}

func (c trackedCost) rate() float64 { return float64(c.checks) / c.elapsed.Seconds() }

// trackedCurve loads n tracked payments (stored UNPAID as Create leaves
// them, their first check pending a day or more ahead on the check queue)
// on a redis-server of its own, then creates checkN payments at the
// payment provider simulator whose first check is due at once, and runs
// the check queue with the deployment's concurrency (32) until each of
// them has had its query answered and its next check scheduled.
func trackedCurve(tb testing.TB, n, checkN int) trackedCost {
	tb.Helper()
	ctx := context.Background()
	srv := testenv.StartRedis(tb, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer rdb.Close()

	sim := paysim.New(paysim.Options{
		MchID: "1900000001", AppID: "wxapp", APIv3Key: []byte(wechatpay.DevAPIv3Key),
		PlatformKey: testPlatformKey(tb), MerchantPub: &wechatpay.DevMerchantKey().PublicKey,
	})
	simSrv := httptest.NewServer(sim.Handler())
	defer simSrv.Close()
	client := wechatpay.NewClient(wechatpay.ClientOptions{
		BaseURL: simSrv.URL, MchID: "1900000001", AppID: "wxapp", Key: wechatpay.DevMerchantKey(),
		APIv3Key: []byte(wechatpay.DevAPIv3Key),
	})
	store := paystore.New(rdb, "curve", 30*24*time.Hour)
	queue := delayq.New(rdb, delayq.Options{Name: "curve:reconcile", Concurrency: 32})
	// The first query is due 1 ms after creation, the next an hour later:
	// each created payment is checked once during the run.
	svc := reconcile.New(store, client, queue, reconcile.Options{
		Schedule: []time.Duration{time.Millisecond, time.Hour, 2 * time.Hour},
	})

	c := trackedCost{tracked: n, checks: checkN}
	before := testenv.UsedMemory(tb, rdb)
	loadStart := time.Now()
	loadTracked(tb, store, queue, n)
	tb.Logf("%d tracked payments loaded in %v", n, time.Since(loadStart).Round(time.Millisecond))
	c.bytesPerPay = float64(testenv.UsedMemory(tb, rdb)-before) / float64(n)

	// The checked payments are placed while the queue is not running, so
	// the run times checks only.
	for i := range checkN {
		if _, err := svc.Create(ctx, "m1", fmt.Sprintf("CHK%017d", i), 100, "curve"); err != nil {
			tb.Fatal(err)
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		tb.Fatal(err)
	}

	var done atomic.Int64
	var mu sync.Mutex
	c.durations = make([]time.Duration, 0, checkN)
	all := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = queue.Run(runCtx, func(ctx context.Context, j delayq.Job) error {
			t0 := time.Now()
			err := svc.Check(ctx, j.ID, j.Due)
			if err == nil {
				mu.Lock()
				c.durations = append(c.durations, time.Since(t0))
				mu.Unlock()
				if done.Add(1) == int64(checkN) {
					close(all)
				}
			}
			return err
		})
	}()
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		tb.Fatalf("%d of %d checks done in 10 minutes", done.Load(), checkN)
	}
	c.elapsed = time.Since(start)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	c.heapInUse, c.rss = ms.HeapInuse, residentBytes(tb)
	stop()
	<-ran
	slices.Sort(c.durations)
	// Redis' own time per call during the checks, to tell a cost that
	// grows with n from the machine's load.
	if stats, err := rdb.Info(ctx, "commandstats").Result(); err == nil {
		for line := range strings.SplitSeq(stats, "\r\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_hgetall:") {
				tb.Logf("tracked=%d %s", n, line)
			}
		}
	}

	// Every checked payment moved to its next slot; no tracked one was
	// touched.
	for _, code := range []string{"CHK00000000000000000", fmt.Sprintf("CHK%017d", checkN-1)} {
		p, err := store.Get(ctx, wechatpay.OutTradeNo("m1", code))
		if err != nil || p.Slot != 1 || len(p.Attempts) != 1 || p.Attempts[0].TradeState != wechatpay.TradeStateNotPay {
			tb.Fatalf("checked payment %s: slot %d, attempts %+v, err %v; want slot 1 after one NOTPAY query", code, p.Slot, p.Attempts, err)
		}
	}
	if p, err := store.Get(ctx, wechatpay.OutTradeNo(trackedMember(n-1), trackedCode(n-1))); err != nil || p.Slot != 0 || len(p.Attempts) != 0 {
		tb.Fatalf("tracked payment %s: slot %d, %d attempts, err %v; want untouched", trackedCode(n-1), p.Slot, len(p.Attempts), err)
	}
	return c
}

func trackedCode(i int) string { return fmt.Sprintf("ORD%017d", i) }

func trackedMember(i int) string { return fmt.Sprintf("m%d", i%1000) }

// loadTracked stores n payments as Create leaves them (indexed by order
// code, stored under their out_trade_no) and schedules the first check of
// each a day or more ahead, through the store's and the
// queue's own calls from 64 goroutines (no provider calls: these orders
// are never checked during the run).
func loadTracked(tb testing.TB, store *paystore.Store, queue *delayq.Queue, n int) {
	tb.Helper()
	ctx := context.Background()
	far := time.Now().Add(24 * time.Hour)
	const workers = 64
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				code, member := trackedCode(i), trackedMember(i)
				tradeNo := wechatpay.OutTradeNo(member, code)
				now := time.Now()
				due := far.Add(time.Duration(i%86400) * time.Second)
				p := paystore.Payment{
					TradeNo: tradeNo, OrderCode: code, Member: member, AmountFen: 100 + int64(i%10000),
					Description: "order " + code, CodeURL: "weixin://wxpay/bizpayurl?pr=" + code[len(code)-7:],
					Status: paystore.StatusUnpaid, Tracking: true, CreateTime: now, NextCheck: due,
				}
				if err := store.IndexCode(ctx, code, member); err != nil {
					errs <- err
					return
				}
				if err := store.Create(ctx, p); err != nil {
					errs <- err
					return
				}
				if err := queue.Schedule(ctx, tradeNo, due, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// residentBytes is this process's resident set size (VmRSS).
func residentBytes(tb testing.TB) uint64 {
	tb.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestTrackedCurveHarness runs the cost curve at its smallest size, so
// make test keeps the harness working.
func TestTrackedCurveHarness(t *testing.T) {
	c := trackedCurve(t, 1000, 50)
	if len(c.durations) != 50 {
		t.Errorf("%d of 50 checks timed", len(c.durations))
	}
	if c.bytesPerPay <= 0 || c.bytesPerPay > 8192 {
		t.Errorf("%.0f bytes per tracked payment, want between 0 and 8 KiB (the queue's fixed structures weigh most at 10^3)", c.bytesPerPay)
	}
	if c.heapInUse == 0 || c.rss == 0 {
		t.Errorf("heap in use %d B, RSS %d B", c.heapInUse, c.rss)
	}
}

// BenchmarkTrackedCurve records the reconciler's cost curve: Redis bytes
// per tracked payment, the process's heap in use and RSS, and the rate and
// duration (p50, p99) of 1,000 checks against the payment provider
// simulator with 10^3 to 10^6 payments tracked, each size on a
// redis-server of its own.
func BenchmarkTrackedCurve(b *testing.B) {
	const checkN = 1000
	for b.Loop() {
		for _, n := range []int{1e3, 1e4, 1e5, 1e6} {
			c := trackedCurve(b, n, checkN)
			x := float64(n)
			params := "tracked=" + benchrec.FormatNumber(x)
			point := func(series string) *benchrec.Point {
				return &benchrec.Point{Series: series, X: x, XLabel: "payments tracked"}
			}
			benchrec.Record(b, benchrec.Figure{Group: benchrec.CurveGroup, Name: "reconciler Redis bytes per tracked payment", Params: params,
				Value: c.bytesPerPay, Unit: "B", Better: benchrec.Lower, Curve: point("reconciler: Redis bytes")})
			benchrec.Record(b, benchrec.Figure{Group: benchrec.CurveGroup, Name: "reconciler heap in use", Params: params,
				Value: float64(c.heapInUse) / (1 << 20), Unit: "MiB", Better: benchrec.Lower, Curve: point("reconciler: heap in use"),
				Note: "process with the simulator, after the checks"})
			benchrec.Record(b, benchrec.Figure{Group: benchrec.CurveGroup, Name: "reconciler RSS", Params: params,
				Value: float64(c.rss) / (1 << 20), Unit: "MiB", Better: benchrec.Lower, Curve: point("reconciler: RSS")})
			benchrec.Record(b, benchrec.Figure{Group: benchrec.CurveGroup, Name: "reconciler check throughput", Params: params,
				Value: c.rate(), Unit: "checks/s", Curve: point("reconciler: checks per second"),
				Note: fmt.Sprintf("%d checks, concurrency 32, against the simulator", c.checks)})
			benchrec.RecordCurveLatencies(b, "reconciler", params, x, "payments tracked",
				benchrec.Latencies{Name: "check", Sorted: c.durations})
		}
	}
}
