package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// Figures of the capacity model (README "Capacity model"): order-split
// throughput and latency with 1, 2 and 3 split-worker replicas on one
// Redis and with 3 replicas on a 3-master Redis Cluster (its running pool
// one pool, then split in 3 shards), and the CPU each
// service and Redis spend per operation, read from /proc and INFO cpu, so
// the per-core figures hold on a box whose other cores are busy.
const (
	capClients  = 24                     // submitters, each waits for its order's end
	capWindow   = 6 * time.Second        // submission window of one split run
	capPoll     = 50 * time.Millisecond  // a submitter's status poll interval
	capStatusN  = 16                     // clients of the status-read run
	capStatusD  = 3 * time.Second        // length of the status-read run
	capPayments = 150                    // payments whose checks the reconciler runs
	capJobMin   = "2ms"                  // fulfilment job time, low so the split
	capJobMax   = "5ms"                  // work and not the fulfilment system bounds
	capSlots    = "32"                   // fulfilment concurrency N
	capCheckEnd = 5 * time.Second        // payments tracked this long (schedule 1s,2s,3s)
	capGroup    = "capacity"             // the figures' group
	capDrain    = 60 * time.Second       // longest wait for an order to end
	capSettle   = 500 * time.Millisecond // pause between runs
)

// BenchmarkCapacity measures the figures of the capacity model.
func BenchmarkCapacity(b *testing.B) {
	for b.Loop() {
		single := testenv.StartRedis(b, false)
		// A RabbitMQ node of the benchmark's own, so its CPU time is the
		// stack's alone.
		rabbit, err := testenv.StartRabbit(b.TempDir(), 90*time.Second)
		if err != nil {
			b.Fatalf("start RabbitMQ: %v", err)
		}
		b.Cleanup(rabbit.Kill)
		s := capacityStack(b, single.Addr, rabbit.URL(), false)
		toks := memberTokens(b, s)
		tok := toks[0]
		setCatalogue(b, s)
		sw := []string{stacktest.SplitWorker, stacktest.SplitWorker + "-2", stacktest.SplitWorker + "-3"}
		s.Stop(sw[2])
		s.Stop(sw[1])
		var ids, owners []string
		var runs []splitResult
		for r := 1; r <= 3; r++ {
			if r > 1 {
				s.Start(sw[r-1])
			}
			time.Sleep(capSettle)
			run := splitRun(b, s, toks, sw[:r], []string{single.Addr}, rabbit.ProcessGroup())
			ids, owners = append(ids, run.ids...), append(owners, run.owners...)
			run.record(b, fmt.Sprintf("split-workers=%d, one Redis", r))
			runs = append(runs, run)
		}
		st := statusRun(b, s, owners, ids, []string{single.Addr})
		st.record(b)
		// Gateway CPU of a split run = submits·a + polls·b, with b the
		// status run's CPU per read: a is what a submit costs.
		perRead := st.gatewayCPU / float64(st.reads)
		var cpu, subs, polls float64
		for _, r := range runs {
			cpu += r.gatewayCPU - float64(r.polls)*perRead
			subs += float64(r.submits)
			polls += float64(r.polls)
		}
		if cpu > 0 {
			benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "gateway: order-split submits per core-second", Params: "REST, one Redis",
				Value: subs / cpu, Unit: "submits/s",
				Note: fmt.Sprintf("gateway CPU of the split runs minus their %d status polls at %.0f µs each, over %d submits; load %s", int(polls), perRead*1e6, int(subs), loadAvg())})
		}
		payRun(b, s, tok).record(b)
		// The same stack with the persistence production requires.
		enableAOF(b, single.Addr)
		time.Sleep(capSettle)
		splitRun(b, s, toks, sw, []string{single.Addr}, rabbit.ProcessGroup()).record(b, "split-workers=3, one Redis, AOF appendfsync always")

		cluster := testenv.StartRedisCluster(b, 3)
		c := capacityStack(b, strings.Join(cluster, ","), "", true)

		setCatalogue(b, c)
		time.Sleep(capSettle)
		ctoks := memberTokens(b, c)
		splitRun(b, c, ctoks, sw, cluster, 0).record(b, "split-workers=3, 3-master Redis Cluster")

		// The same cluster with the running pool split in one shard per
		// master: every split-worker stopped before k changes, as the
		// sharded running pool requires (docs/architecture.md, "Sharding").
		for _, w := range sw {
			c.Stop(w)
			c.SetEnv(w, "ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS", "3")
		}
		for _, w := range sw {
			c.Start(w)
		}
		time.Sleep(capSettle)
		splitRun(b, c, ctoks, sw, cluster, 0).record(b, "split-workers=3, 3-master Redis Cluster, running pool in 3 shards")
	}
}

// memberTokens are one member's token per submitter: a member's tasks
// share a hash tag and the split-worker runs at most
// ORDERFLOW_SPLITWORKER_MEMBER_CONCURRENCY of one member's orders at once.
func memberTokens(b *testing.B, s *stacktest.Stack) []string {
	b.Helper()
	toks := make([]string, capClients)
	for i := range toks {
		toks[i] = s.DevToken(b, fmt.Sprintf("cap-%02d", i))
	}
	return toks
}

// capacityStack starts a stack with three split-workers on the Redis at
// addr (a comma list for a cluster) and the RabbitMQ at amqpURL (the
// shared one when "").
func capacityStack(b *testing.B, addr, amqpURL string, cluster bool) *stacktest.Stack {
	b.Helper()
	redisEnv := map[string]string{"ORDERFLOW_LOG_LEVEL": "warn"}
	if cluster {
		redisEnv["ORDERFLOW_REDIS_CLUSTER"] = "true"
	}
	return stacktest.Start(b, stacktest.Options{
		RedisAddr: addr,
		AMQPURL:   amqpURL,
		Env:       redisEnv,
		Replicas:  map[string]int{stacktest.SplitWorker: 3},
		ServiceEnv: map[string]map[string]string{
			stacktest.Fulfilment:  {"ORDERFLOW_FULFILMENT_CAPACITY": capSlots, "ORDERFLOW_FULFILMENT_JOB_MIN": capJobMin, "ORDERFLOW_FULFILMENT_JOB_MAX": capJobMax},
			stacktest.SplitWorker: {"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS": capSlots, "ORDERFLOW_SPLITWORKER_POLL_INITIAL": "5ms", "ORDERFLOW_SPLITWORKER_POLL_MAX": "50ms"},
			stacktest.Gateway:     {"ORDERFLOW_GATEWAY_RATE_LIMIT": "0"},
			stacktest.Reconciler:  {"ORDERFLOW_RECONCILE_SCHEDULE": "1s,2s,3s"},
		},
	})
}

// capSKUs is the catalogue: plenty of stock, so every order ships the
// same way (20 items of 5 SKUs in 2 warehouses, as BenchmarkSubmitToTerminal).
var capSKUs = []map[string]any{
	{"sku": "SKU-A", "warehouse": "WH-1", "stock": 1 << 30, "weightGrams": 900},
	{"sku": "SKU-B", "warehouse": "WH-1", "stock": 1 << 30, "weightGrams": 1500},
	{"sku": "SKU-C", "warehouse": "WH-2", "stock": 1 << 30, "weightGrams": 400},
	{"sku": "SKU-D", "warehouse": "WH-2", "stock": 1 << 30, "weightGrams": 2500},
	{"sku": "SKU-E", "warehouse": "WH-2", "stock": 1 << 30, "weightGrams": 700},
}

func setCatalogue(b *testing.B, s *stacktest.Stack) {
	b.Helper()
	if st, body := call(b, "PUT", s.URL(stacktest.Fulfilment)+"/admin/catalogue", "", map[string]any{"skus": capSKUs}); st/100 != 2 {
		b.Fatalf("set catalogue = %d %v", st, body)
	}
}

// enableAOF turns on appendonly with appendfsync always on the Redis at
// addr and waits for the first rewrite to end.
func enableAOF(b *testing.B, addr string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for _, kv := range [][2]string{{"appendfsync", "always"}, {"appendonly", "yes"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			b.Fatalf("CONFIG SET %s %s: %v", kv[0], kv[1], err)
		}
	}
	for {
		info, err := rdb.Info(ctx, "persistence").Result()
		if err != nil {
			b.Fatalf("INFO persistence: %v", err)
		}
		if strings.Contains(info, "aof_enabled:1") && strings.Contains(info, "aof_rewrite_in_progress:0") && !strings.Contains(info, "aof_rewrite_scheduled:1") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cpuSnap is the CPU time used so far by some processes and Redis nodes.
type cpuSnap map[string]float64

// snapCPU reads the CPU seconds of the named stack processes and of the
// Redis nodes at addrs (their INFO cpu, summed as "redis").
func snapCPU(b *testing.B, s *stacktest.Stack, names []string, addrs []string) cpuSnap {
	b.Helper()
	c := cpuSnap{}
	for _, n := range names {
		c[n] = procCPU(b, s.Pid(n))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		info, err := rdb.Info(ctx, "cpu").Result()
		_ = rdb.Close()
		if err != nil {
			b.Fatalf("INFO cpu of %s: %v", a, err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(l, ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, _ := strconv.ParseFloat(v, 64)
				c["redis"] += f
				c["redis "+a] += f
			}
		}
	}
	return c
}

// since is the CPU seconds each entry used between old and c.
func (c cpuSnap) since(old cpuSnap) cpuSnap {
	d := cpuSnap{}
	for k, v := range c {
		d[k] = v - old[k]
	}
	return d
}

// procCPU is the user+system CPU seconds process pid has used.
func procCPU(b *testing.B, pid int) float64 {
	b.Helper()
	c, err := testenv.ProcessCPU(pid)
	if err != nil {
		b.Fatalf("read CPU time of pid %d: %v", pid, err)
	}
	return c
}

// groupCPU is the user+system CPU seconds used so far by the live
// processes of process group pgid (0, or none left alive: 0).
func groupCPU(b *testing.B, pgid int) float64 {
	b.Helper()
	if pgid == 0 {
		return 0
	}
	c, err := testenv.GroupCPU(pgid)
	if err != nil {
		return 0
	}
	return c
}

// loadAvg is the machine's 1-minute load average now.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(raw))[0] + " (2 cores)"
}

// splitResult is one split run.
type splitResult struct {
	lat            []time.Duration
	ids, owners    []string // the orders' task ids and their members' tokens
	submits, polls int
	wall           time.Duration
	cpu            cpuSnap
	workers        []string
	masters        []string
	gatewayCPU     float64
	shipments      int
	load           string
}

// splitRun has capClients submitters each submit a 20-item order, poll its
// status every capPoll until it ends, and start again, for capWindow; the
// orders submitted in the window are all waited for.
func splitRun(b *testing.B, s *stacktest.Stack, toks, workers, redisAddrs []string, rabbitGroup int) splitResult {
	b.Helper()
	gw := s.URL(stacktest.Gateway)
	var items []map[string]any
	for i := range 20 {
		items = append(items, map[string]any{"itemCode": fmt.Sprintf("I%02d", i), "sku": capSKUs[i%5]["sku"], "quantity": 1})
	}
	procs := append([]string{stacktest.Gateway}, workers...)
	before := snapCPU(b, s, procs, redisAddrs)
	rabbit0 := groupCPU(b, rabbitGroup)
	res := splitResult{workers: workers, masters: redisAddrs}
	var mu sync.Mutex
	var polls atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	end := t0.Add(capWindow)
	for c := range capClients {
		tok := toks[c%len(toks)]
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				start := time.Now()
				st, task := call(b, "POST", gw+"/v1/order-splits", tok, map[string]any{"orderCode": fmt.Sprintf("C-%d-%d-%d", start.UnixNano(), c, i), "items": items})
				if st != 200 {
					b.Errorf("submit = %d %v", st, task)
					return
				}
				id, _ := task["taskId"].(string)
				for task["status"] == "TASK_STATUS_PROCESSING" && time.Since(start) < capDrain {
					time.Sleep(capPoll)
					polls.Add(1)
					_, task = call(b, "GET", gw+"/v1/tasks/"+id, tok, nil)
				}
				if task["status"] != "TASK_STATUS_SUCCEEDED" {
					b.Errorf("order %s ended %v, want SUCCEEDED", id, task["status"])
					return
				}
				// The task's update time is when it ended; polling adds
				// up to capPoll on the client's side.
				d := time.Since(start)
				if ut, err := time.Parse(time.RFC3339Nano, fmt.Sprint(task["updateTime"])); err == nil && ut.After(start) {
					d = ut.Sub(start)
				}
				r, _ := task["result"].(map[string]any)
				sh, _ := r["shipments"].([]any)
				mu.Lock()
				res.lat = append(res.lat, d)
				res.ids, res.owners = append(res.ids, id), append(res.owners, tok)
				res.shipments += len(sh)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(t0)
	res.cpu = snapCPU(b, s, procs, redisAddrs).since(before)
	res.cpu["rabbitmq"] = groupCPU(b, rabbitGroup) - rabbit0
	res.submits, res.polls = len(res.lat), int(polls.Load())
	res.gatewayCPU = res.cpu[stacktest.Gateway]
	res.load = loadAvg()
	if len(res.lat) == 0 {
		b.Fatal("no order finished")
	}
	slices.Sort(res.lat)
	return res
}

// busiestMaster is the CPU seconds of the Redis node that used most, and
// its address.
func (r splitResult) busiestMaster() (float64, string) {
	var most float64
	var addr string
	for _, a := range r.masters {
		if c := r.cpu["redis "+a]; c > most {
			most, addr = c, a
		}
	}
	return most, addr
}

func (r splitResult) record(b *testing.B, params string) {
	b.Helper()
	n := float64(len(r.lat))
	var swCPU float64
	for _, w := range r.workers {
		swCPU += r.cpu[w]
	}
	p := func(q int) time.Duration { return r.lat[(len(r.lat)-1)*q/100].Round(time.Millisecond) }
	cond := fmt.Sprintf("%s; %d submitters of one member each, 20-item orders, jobs %s–%s, N = %s; load %s", params, capClients, capJobMin, capJobMax, capSlots, r.load)
	benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "order splits per second", Params: params,
		Value: n / r.wall.Seconds(), Unit: "orders/s",
		Note: fmt.Sprintf("%d orders in %v, %.1f shipments each; p50 %v, p99 %v; load %s", len(r.lat), r.wall.Round(100*time.Millisecond), float64(r.shipments)/n, p(50), p(99), r.load)})
	benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "submit → terminal, p99", Params: params,
		Value: benchrec.In(r.lat[(len(r.lat)-1)*99/100], "ms"), Unit: "ms", Better: benchrec.Lower, Dist: benchrec.Dist(r.lat, "ms"), Note: cond})
	if swCPU > 0 {
		benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "split-worker: order splits per core-second", Params: params,
			Value: n / swCPU, Unit: "orders/s", Note: fmt.Sprintf("%.1f CPU s over %d replicas for %d orders; load %s", swCPU, len(r.workers), len(r.lat), r.load)})
	}
	if r.cpu["redis"] > 0 {
		benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "Redis: order splits per core-second", Params: params,
			Value: n / r.cpu["redis"], Unit: "orders/s", Note: fmt.Sprintf("%.2f CPU s of redis-server (INFO cpu, all masters) incl. %d status polls; load %s", r.cpu["redis"], r.polls, r.load)})
	}
	if busiest, addr := r.busiestMaster(); len(r.masters) > 1 && busiest > 0 {
		benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "Redis Cluster: order splits per core-second of the busiest master", Params: params,
			Value: n / busiest, Unit: "orders/s",
			Note: fmt.Sprintf("%s used %.2f of the masters' %.2f CPU s: the keys of one hash tag share a master; load %s", addr, busiest, r.cpu["redis"], r.load)})
	}
	if r.cpu["rabbitmq"] > 0 {
		benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "RabbitMQ: order splits per core-second", Params: params,
			Value: n / r.cpu["rabbitmq"], Unit: "orders/s", Note: fmt.Sprintf("%.2f CPU s of the node's processes (one node, quorum queues); load %s", r.cpu["rabbitmq"], r.load)})
	}
}

// statusResult is one status-read run.
type statusResult struct {
	reads      int
	lat        []time.Duration
	wall       time.Duration
	gatewayCPU float64
	redisCPU   float64
	load       string
}

// statusRun has capStatusN clients read finished tasks' status over REST
// as fast as they are answered, for capStatusD.
func statusRun(b *testing.B, s *stacktest.Stack, owners, ids, redisAddrs []string) statusResult {
	b.Helper()
	gw := s.URL(stacktest.Gateway)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: capStatusN}}
	before := snapCPU(b, s, []string{stacktest.Gateway}, redisAddrs)
	var mu sync.Mutex
	var res statusResult
	var wg sync.WaitGroup
	t0 := time.Now()
	end := t0.Add(capStatusD)
	for c := range capStatusN {
		wg.Go(func() {
			var lat []time.Duration
			for i := c; time.Now().Before(end); i++ {
				req, _ := http.NewRequest("GET", gw+"/v1/tasks/"+ids[i%len(ids)], nil)
				req.Header.Set("Authorization", "Bearer "+owners[i%len(ids)])
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Errorf("status read: %v", err)
					return
				}
				_, _ = bufio.NewReader(resp.Body).WriteTo(devNull{})
				_ = resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Errorf("status read = %d", resp.StatusCode)
					return
				}
				lat = append(lat, time.Since(start))
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.wall = time.Since(t0)
	d := snapCPU(b, s, []string{stacktest.Gateway}, redisAddrs).since(before)
	res.gatewayCPU, res.redisCPU, res.reads, res.load = d[stacktest.Gateway], d["redis"], len(res.lat), loadAvg()
	if res.reads == 0 {
		b.Fatal("no status read answered")
	}
	slices.Sort(res.lat)
	return res
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

func (r statusResult) record(b *testing.B) {
	b.Helper()
	params := fmt.Sprintf("REST GET /v1/tasks/{id}, %d clients, one Redis", capStatusN)
	benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "gateway: status reads per core-second", Params: params,
		Value: float64(r.reads) / r.gatewayCPU, Unit: "reads/s",
		Note: fmt.Sprintf("%d reads in %v (%.0f/s wall), p99 %v, gateway %.2f CPU s; load %s", r.reads, r.wall.Round(100*time.Millisecond),
			float64(r.reads)/r.wall.Seconds(), r.lat[(len(r.lat)-1)*99/100].Round(100*time.Microsecond), r.gatewayCPU, r.load)})
	if r.redisCPU > 0 {
		benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "Redis: status reads per core-second", Params: params,
			Value: float64(r.reads) / r.redisCPU, Unit: "reads/s", Note: fmt.Sprintf("redis-server %.2f CPU s (INFO cpu); load %s", r.redisCPU, r.load)})
	}
}

// payResult is one run of payment checks.
type payResult struct {
	calls         float64
	reconcilerCPU float64
	load          string
}

// payRun creates capPayments payments through the gateway and lets the
// reconciler check each on its schedule (1 s, 2 s, 3 s) for capCheckEnd,
// counting the provider calls it made and the CPU it used.
func payRun(b *testing.B, s *stacktest.Stack, tok string) payResult {
	b.Helper()
	gw := s.URL(stacktest.Gateway)
	calls0 := providerCalls(b, s)
	before := snapCPU(b, s, []string{stacktest.Reconciler}, nil)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				code := fmt.Sprintf("CAP-%d-%d", time.Now().UnixNano(), i)
				if st, body := call(b, "POST", gw+"/v1/payments", tok, map[string]any{"orderCode": code, "amountFen": 500, "description": "tea"}); st != 200 {
					b.Errorf("POST /v1/payments = %d %v", st, body)
				}
			}
		})
	}
	for i := range capPayments {
		next <- i
	}
	close(next)
	wg.Wait()
	time.Sleep(capCheckEnd)
	d := snapCPU(b, s, []string{stacktest.Reconciler}, nil).since(before)
	return payResult{calls: providerCalls(b, s) - calls0, reconcilerCPU: d[stacktest.Reconciler], load: loadAvg()}
}

func (r payResult) record(b *testing.B) {
	b.Helper()
	if r.reconcilerCPU <= 0 || r.calls <= 0 {
		b.Errorf("reconciler: %.0f provider calls, %.2f CPU s: nothing measured", r.calls, r.reconcilerCPU)
		return
	}
	benchrec.Record(b, benchrec.Figure{Group: capGroup, Name: "reconciler: provider calls (create, checks) per core-second",
		Params: fmt.Sprintf("%d payments, checks at 1 s, 2 s, 3 s", capPayments), Value: r.calls / r.reconcilerCPU, Unit: "calls/s",
		Note: fmt.Sprintf("%.0f calls, reconciler %.2f CPU s (gRPC create included); load %s", r.calls, r.reconcilerCPU, r.load)})
}

// providerCalls sums the reconciler's orderflow_reconciler_provider_calls_total.
func providerCalls(b *testing.B, s *stacktest.Stack) float64 {
	b.Helper()
	resp, err := s.GetMetrics(stacktest.Reconciler)
	if err != nil {
		b.Fatalf("reconciler metrics: %v", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "orderflow_reconciler_provider_calls_total") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}
