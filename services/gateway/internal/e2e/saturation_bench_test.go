package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/promcheck"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// Saturation: a backlog of orders is submitted with the split-worker
// stopped, then the split-worker is started and drains it. The drain rate
// is the orders per second the split-worker finishes with Redis, RabbitMQ
// and the fulfilment simulator (jobs of 0 ms, N far above the load)
// behind it; the baseline is a bare pipeline of the same engines in the
// same run draining the same number of messages: one Redis read, one
// fulfilment create over HTTP, one Redis write and an ack per message.
const (
	saturationOrders   = 3000
	saturationMembers  = 32 // the per-member bound does not limit the drain
	saturationHandlers = 64
)

// BenchmarkSaturation measures, over real processes, the orders per
// second the split-worker finishes from a backlog (1-item and 20-item
// orders) beside the bare pipeline, in benchrec.Rounds(5) rounds of both
// (the figure is the median; the ratio the median of the rounds' ratios),
// and the CPU seconds each process spends per 1,000 orders (the
// gateway's while the backlog is submitted; the split-worker's, the
// simulator's, Redis's and RabbitMQ's during the drain). In the pinned
// pass (benchrec.Pinning) the split-worker and the simulator run on the
// server CPUs, and so does the bare pipeline's consumer (this process,
// while it drains); Redis and RabbitMQ are left where they run.
func BenchmarkSaturation(b *testing.B) {
	for b.Loop() {
		for _, size := range []struct {
			name   string
			items  int
			orders int
		}{{"1-item", 1, saturationOrders}, {"20-item", 20, saturationOrders / 5}} {
			saturation(b, size.name, size.items, size.orders)
		}
	}
}

// satRound is what one round of a saturation cell measured.
type satRound struct {
	rate, bare, submit float64
	frames             float64            // the split-worker's settle frames per 1,000 orders
	cpu                map[string]float64 // CPU s per 1,000 orders by process
}

func saturation(b *testing.B, name string, items, orders int) {
	s := stacktest.Start(b, stacktest.Options{ServiceEnv: map[string]map[string]string{
		stacktest.Fulfilment: {"ORDERFLOW_FULFILMENT_JOB_MIN": "0s", "ORDERFLOW_FULFILMENT_JOB_MAX": "0s",
			"ORDERFLOW_FULFILMENT_CAPACITY": "100000", "ORDERFLOW_LOG_LEVEL": "warn"},
		stacktest.SplitWorker: {"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS": "1024", "ORDERFLOW_SPLITWORKER_CONCURRENCY": strconv.Itoa(saturationHandlers),
			"ORDERFLOW_SPLITWORKER_PREFETCH": strconv.Itoa(2 * saturationHandlers), "ORDERFLOW_SPLITWORKER_MEMBER_CONCURRENCY": "0",
			"ORDERFLOW_SPLITWORKER_POLL_INITIAL": "2ms", "ORDERFLOW_SPLITWORKER_POLL_MAX": "20ms", "ORDERFLOW_LOG_LEVEL": "warn"},
		stacktest.Gateway: {"ORDERFLOW_LOG_LEVEL": "warn", "ORDERFLOW_GATEWAY_RATE_LIMIT": "0"},
	}})
	skus := stockCatalogue(b, s)
	var lines []map[string]any
	for i := range items {
		lines = append(lines, map[string]any{"itemCode": fmt.Sprintf("I%02d", i), "sku": skus[i%len(skus)]["sku"], "quantity": 1})
	}
	tokens := make([]string, saturationMembers)
	for i := range tokens {
		tokens[i] = s.DevToken(b, fmt.Sprintf("sat-%02d", i))
	}
	pin, pinned := benchrec.Pinning()
	placed := "unpinned"
	if pinned {
		placed = fmt.Sprintf("split-worker, simulator and the bare consumer on CPU %s, Redis and RabbitMQ unpinned", pin.Server)
		if err := benchrec.PinProcess(s.Pid(stacktest.Fulfilment), pin.Server); err != nil {
			b.Fatal(err)
		}
	}
	rounds := benchrec.Rounds(5)
	var rs []satRound
	for range rounds {
		rs = append(rs, saturationRound(b, s, tokens, lines, orders, pin, pinned))
	}
	pick := func(f func(satRound) float64) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = f(r)
		}
		return out
	}
	rates, bares := pick(func(r satRound) float64 { return r.rate }), pick(func(r satRound) float64 { return r.bare })
	cond := fmt.Sprintf("%s orders, backlog of %d, %d handlers, fulfilment jobs of 0 ms, %d rounds, %s", name, orders, saturationHandlers, rounds, placed)
	benchrec.Record(b, benchrec.Figure{Group: "saturation", Name: "orders finished per second by the split-worker from a backlog",
		Params: cond, Value: benchrec.Median(rates), Unit: "orders/s", Samples: rates,
		Baseline:   &benchrec.Baseline{Name: "bare pipeline (Redis read, HTTP create, Redis write, ack)", Value: benchrec.Median(bares), Samples: bares},
		RatioPairs: benchrec.PairRatios(rates, bares), Goals: saturationGoals(items), Pinned: pinned,
		Note: fmt.Sprintf("median of %d rounds, each %d orders", rounds, orders)})
	submits := pick(func(r satRound) float64 { return r.submit })
	benchrec.Record(b, benchrec.Figure{Group: "saturation", Name: "orders submitted per second (16 REST clients)",
		Params: cond, Value: benchrec.Median(submits), Unit: "orders/s", Samples: submits, Pinned: pinned})
	frames := pick(func(r satRound) float64 { return r.frames })
	benchrec.Record(b, benchrec.Figure{Group: "saturation", Name: "RabbitMQ ack frames per 1,000 orders: split-worker",
		Params: cond, Value: benchrec.Median(frames), Unit: "frames", Better: benchrec.Lower, Samples: frames, Pinned: pinned,
		Note: "acks that go together are one frame; the bare consumer sends one per order"})
	for _, proc := range []string{"gateway (submit)", "split-worker", "fulfilment simulator", "Redis", "RabbitMQ (submit and drain)"} {
		v := pick(func(r satRound) float64 { return r.cpu[proc] })
		benchrec.Record(b, benchrec.Figure{Group: "saturation", Name: "CPU seconds per 1,000 orders: " + proc,
			Params: cond, Value: benchrec.Median(v), Unit: "CPU s", Better: benchrec.Lower, Samples: v, Pinned: pinned})
	}
}

// saturationRound submits a backlog of orders with the split-worker
// stopped, starts it and times the drain, then drains as many messages
// through the bare pipeline.
func saturationRound(b *testing.B, s *stacktest.Stack, tokens []string, lines []map[string]any, orders int, pin benchrec.Pin, pinned bool) satRound {
	s.Stop(stacktest.SplitWorker)
	gw := s.URL(stacktest.Gateway)
	gwCPU := procCPU(b, s.Pid(stacktest.Gateway))
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < orders; i = int(next.Add(1)) - 1 {
				st, body := call(b, "POST", gw+"/v1/order-splits", tokens[i%len(tokens)], map[string]any{
					"orderCode": fmt.Sprintf("SAT-%d-%d", start.UnixNano(), i), "items": lines})
				if st != http.StatusOK {
					b.Errorf("submit = %d %v", st, body)
					return
				}
			}
		})
	}
	wg.Wait()
	r := satRound{submit: float64(orders) / time.Since(start).Seconds(), cpu: map[string]float64{}}
	gwCPU = procCPU(b, s.Pid(stacktest.Gateway)) - gwCPU

	// The drain, counted from the tasks' change events (one per task that
	// ends), so that counting costs the split-worker nothing.
	finished, stopCount := countFinished(b, s)
	before := engineCPU(b, s)
	simCPU := procCPU(b, s.Pid(stacktest.Fulfilment))
	s.Start(stacktest.SplitWorker)
	if pinned {
		if err := benchrec.PinProcess(s.Pid(stacktest.SplitWorker), pin.Server); err != nil {
			b.Fatal(err)
		}
	}
	workerCPU := procCPU(b, s.Pid(stacktest.SplitWorker))
	drained, dt := drain(b, orders, func() float64 { return float64(finished.Load()) })
	stopCount()
	// The last acks may be held back for up to 20 ms.
	time.Sleep(100 * time.Millisecond)
	frames, ok := promcheck.Value(promcheck.Scrape(b, s.MetricsURL(stacktest.SplitWorker), stacktest.MetricsToken),
		"orderflow_splitworker_settle_frames_total", nil)
	if !ok {
		b.Fatal("orderflow_splitworker_settle_frames_total not in the split-worker's metrics")
	}
	r.frames = frames / float64(orders) * 1000
	workerCPU = procCPU(b, s.Pid(stacktest.SplitWorker)) - workerCPU
	simCPU = procCPU(b, s.Pid(stacktest.Fulfilment)) - simCPU
	after := engineCPU(b, s)
	r.rate = drained / dt.Seconds()
	per := func(cpu float64) float64 { return cpu / float64(orders) * 1000 }
	r.cpu["gateway (submit)"] = per(gwCPU)
	r.cpu["split-worker"] = per(workerCPU)
	r.cpu["fulfilment simulator"] = per(simCPU)
	r.cpu["Redis"] = per(after.redis - before.redis)
	r.cpu["RabbitMQ (submit and drain)"] = per(after.rabbit - before.rabbit)
	r.bare = barePipeline(b, s, orders, pin, pinned)
	return r
}

// countFinished counts the tasks of the stack that end from now on, by
// their change events (Redis pub/sub), until stop is called.
func countFinished(b *testing.B, s *stacktest.Stack) (n *atomic.Int64, stop func()) {
	b.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr()})
	ps := rdb.PSubscribe(ctx, s.Prefix()+":{m:*}:events:*")
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		b.Fatal(err)
	}
	n = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range ps.Channel(redis.WithChannelSize(1 << 16)) {
			n.Add(1)
		}
	}()
	return n, func() {
		_ = ps.Close()
		<-done
		_ = rdb.Close()
	}
}

// saturationGoals are issue-level goals: 1,000 one-item orders/s and
// 0.7 of the bare pipeline.
func saturationGoals(items int) []benchrec.Goal {
	g := []benchrec.Goal{benchrec.AtLeast("ratio", 0.7)}
	if items == 1 {
		g = append(g, benchrec.AtLeast("value", 1000))
	}
	return g
}

// drain waits until done() reaches n and returns how many finished
// between the first one and the last, and how long that took.
func drain(b *testing.B, n int, done func() float64) (float64, time.Duration) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var first float64
	var t0 time.Time
	for time.Now().Before(deadline) {
		d := done()
		if t0.IsZero() && d > 0 {
			first, t0 = d, time.Now()
		}
		if d >= float64(n) {
			return d - first, time.Since(t0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("drain: %v finished of %d after 5 minutes", done(), n)
	return 0, 0
}

type engines struct{ redis, rabbit float64 }

// engineCPU reads Redis's CPU (INFO cpu) and RabbitMQ's (the oldest
// beam.smp process; 0 when there is none to read).
func engineCPU(b *testing.B, s *stacktest.Stack) engines {
	b.Helper()
	e := engines{redis: snapCPU(b, s, nil, []string{s.RedisAddr()})["redis"]}
	out, err := exec.Command("pgrep", "-o", "beam.smp").Output()
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && perr == nil {
		e.rabbit, _ = testenv.ProcessCPU(pid)
	}
	return e
}

// barePipeline drains n messages of a job's size from a quorum queue of
// its own with the split-worker's prefetch and handler count: per message
// one Redis GET, one fulfilment create, one Redis SET and an ack.
func barePipeline(b *testing.B, s *stacktest.Stack, n int, pin benchrec.Pin, pinned bool) float64 {
	b.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr(), PoolSize: 2 * saturationHandlers})
	defer rdb.Close()
	prefix := testenv.Prefix(b)
	defer testenv.DeletePrefix(ctx, rdb, prefix)
	conn, err := amqp.Dial(s.AMQPURL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	queue := prefix + ".bare"
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = ch.QueueDelete(queue, false, false, false) }()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 200)
	for i := range n {
		if err := rdb.Set(ctx, fmt.Sprintf("%s:task:%d", prefix, i), body, time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp.Publishing{Body: []byte(strconv.Itoa(i)), DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 || i == n-1 {
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				b.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
	fc := fulfilment.NewClient(s.URL(stacktest.Fulfilment), nil)
	cch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := cch.Qos(2*saturationHandlers, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := cch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	if pinned {
		// The consumer is this process: on the server CPUs while it drains.
		self := os.Getpid()
		was, err := benchrec.Affinity(self)
		if err != nil {
			b.Fatal(err)
		}
		if err := benchrec.PinProcess(self, pin.Server); err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := benchrec.PinProcess(self, was); err != nil {
				b.Error(err)
			}
		}()
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	for range saturationHandlers {
		wg.Go(func() {
			for d := range deliveries {
				key := fmt.Sprintf("%s:task:%s", prefix, d.Body)
				if _, err := rdb.Get(ctx, key).Bytes(); err != nil {
					b.Error(err)
				}
				if _, err := fc.CreateShipment(ctx, fulfilment.ShipmentRequest{IdempotencyKey: prefix + string(d.Body), Warehouse: "WH-1",
					Lines: []fulfilment.ShipmentLine{{ItemCode: "I00", SKU: "SKU-A", Quantity: 1}}}); err != nil {
					b.Error(err)
				}
				if err := rdb.Set(ctx, key, body, time.Hour).Err(); err != nil {
					b.Error(err)
				}
				_ = d.Ack(false)
				done.Add(1)
			}
		})
	}
	drained, dt := drain(b, n, func() float64 { return float64(done.Load()) })
	_ = cch.Close()
	wg.Wait()
	return drained / dt.Seconds()
}
