package chaos_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/testkit/chaos/faultreport"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Main(m)) }

// The load and the compressed schedules every scenario runs with.
const (
	submitsPerSec = 20
	paysPerSec    = 4
	// warmUp is the load before the fault (the leak gauges' baseline is
	// read at its end: every process has opened its subscriptions by
	// then); afterFault is the load after the first submission accepted
	// after the fault.
	warmUp     = 4 * time.Second
	afterFault = 4 * time.Second
	// recoverDeadline bounds the wait, after the fault ends, for the
	// first accepted submission.
	recoverDeadline = 30 * time.Second
	// settleDeadline bounds the wait, after the load stops, for every
	// accepted submission and payment to be terminal.
	settleDeadline = 90 * time.Second
)

// poolSize is each process's Redis pool cap.
const poolSize = 32

var schedule = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}

// suite is what every scenario shares: the suite's own Redis (AOF,
// appendfsync always) and RabbitMQ node, and the payment provider's
// platform key (kept across a simulator restart, as a real provider's).
type suite struct {
	redis       *testenv.RedisServer
	rabbit      *testenv.RabbitNode
	platformKey string
	// current is the scenario running, for setups that start servers of
	// their own; primary, when a setup sets it, returns the Redis the
	// stack writes to (the suite's Redis otherwise).
	current *testing.T
	primary func() string
	// closers release the fault injectors scenarios set up (proxies).
	closers []func()
}

// run is one scenario's stack, load and fault record.
type run struct {
	t  *testing.T
	su *suite
	s  *stacktest.Stack
	l  *load
	// faultStart and faultEnd bound the fault; recovery is measured from
	// faultEnd.
	faultStart, faultEnd time.Time
	notes                []string
}

func (r *run) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// scenario is one fault. setup adjusts the stack before it starts; fault
// injects the fault under load, ends it, and returns when it has ended
// (the recovery clock starts then); check adds scenario-specific checks.
type scenario struct {
	name  string
	short bool // run (in its short version) by `make test`
	// partition marks the scenarios on replicated engines that
	// `make partition` runs.
	partition bool
	setup     func(su *suite, o *stacktest.Options)
	fault     func(r *run)
	check     func(r *run, res *result)
}

// isFull is set by `make chaos` (ORDERFLOW_CHAOS=full) and `make partition`
// (ORDERFLOW_CHAOS=partition): run every scenario at its full length.
var isFull = os.Getenv("ORDERFLOW_CHAOS") == "full" || partitionOnly

// keepAllLogs (ORDERFLOW_CHAOS_KEEP_LOGS=1) keeps the logs of every
// scenario, not only of those that fail.
var keepAllLogs = os.Getenv("ORDERFLOW_CHAOS_KEEP_LOGS") == "1"

// partitionOnly is set by `make partition`: run only the scenarios on
// replicated engines (Sentinel failovers and network partitions).
var partitionOnly = os.Getenv("ORDERFLOW_CHAOS") == "partition"

// lanes is how many lanes the rows are dealt into, round robin in their
// order (ORDERFLOW_CHAOS_LANES; 3 for the short rows of `make test`, 1 at
// full length or when -run picks rows, TestChaos/<row>, so their names
// stay as they are). Each lane has a Redis and a RabbitMQ node of its own,
// so rows in different lanes share no state and the lanes run side by
// side; the rows of one lane run one after another, as the whole suite
// does with one lane.
func lanes(t *testing.T) int {
	v := os.Getenv("ORDERFLOW_CHAOS_LANES")
	if v == "" {
		if f := flag.Lookup("test.run"); isFull || (f != nil && strings.Contains(f.Value.String(), "/")) {
			return 1
		}
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("ORDERFLOW_CHAOS_LANES=%q: want a whole number of at least 1", v)
	}
	return n
}

// TestChaos runs the fault scenarios and prints one row per scenario.
// ORDERFLOW_CHAOS=full runs every scenario at its full length (`make
// chaos`); otherwise the scenarios marked short, in their short versions
// (`make test`). With more than one lane (lanes) each lane is a subtest
// lane-N of its own, the rows its subtests.
func TestChaos(t *testing.T) {
	var picked []scenario
	for _, sc := range scenarios() {
		if (!isFull && !sc.short) || (partitionOnly && !sc.partition) {
			continue
		}
		picked = append(picked, sc)
	}
	n := min(lanes(t), len(picked))
	var mu sync.Mutex
	rows := make([]*result, len(picked))
	recorded := make([]*faultreport.Row, len(picked))
	runLane := func(t *testing.T, lane int) {
		su := startSuite(t)
		for i := lane; i < len(picked); i += n {
			sc := picked[i]
			t.Run(sc.name, func(t *testing.T) {
				res, s := su.run(t, sc)
				mu.Lock()
				rows[i] = &res
				mu.Unlock()
				res.assert(t)
				row := res.row(t.Failed())
				mu.Lock()
				recorded[i] = &row
				mu.Unlock()
				if t.Failed() || keepAllLogs {
					keepLogs(t, s)
				}
			})
		}
	}
	if n == 1 {
		runLane(t, 0)
	} else {
		// Each lane is a subtest run from a goroutine of its own, not a
		// parallel one: -parallel (GOMAXPROCS) would hold lanes back on a
		// small machine, and the lanes mostly wait on the stacks.
		var wg sync.WaitGroup
		for lane := range n {
			wg.Go(func() {
				t.Run(fmt.Sprintf("lane-%d", lane+1), func(t *testing.T) { runLane(t, lane) })
			})
		}
		wg.Wait()
	}
	var done []result
	for _, r := range rows {
		if r != nil {
			done = append(done, *r)
		}
	}
	if os.Getenv(faultreport.RecordEnv) == "1" {
		var rec []faultreport.Row
		for _, r := range recorded {
			if r != nil {
				rec = append(rec, *r)
			}
		}
		record(t, rec)
	}
	table := formatTable(done)
	if testing.Verbose() {
		fmt.Print(table)
	} else {
		t.Log("\n" + table)
	}
}

// startSuite starts what the rows of one lane share: a Redis (AOF) and a
// RabbitMQ node of their own, and the provider's platform key.
func startSuite(t *testing.T) *suite {
	su := &suite{redis: testenv.StartRedis(t, true)}
	dir := t.TempDir()
	node, err := testenv.StartRabbit(dir, 90*time.Second)
	if err != nil {
		t.Fatalf("start rabbitmq node: %v", err)
	}
	su.rabbit = node
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Logf("stop rabbitmq node: %v", err)
		}
	})
	su.platformKey = writePlatformKey(t, dir)
	t.Cleanup(func() {
		for _, c := range su.closers {
			c()
		}
	})
	return su
}

func scenarios() []scenario {
	kill := func(name string) scenario {
		return scenario{name: "kill -9 " + name, short: true, fault: func(r *run) {
			r.s.Kill(name)
			time.Sleep(2 * time.Second)
			r.s.Start(name)
		}}
	}
	return append([]scenario{
		kill(stacktest.Gateway),
		kill(stacktest.SplitWorker),
		kill(stacktest.Reconciler),
		kill(stacktest.Fulfilment),
		kill(stacktest.PaySim),
		{name: "rabbitmq restart", short: true, fault: func(r *run) {
			if err := r.su.rabbit.Stop(); err != nil {
				// The node is down all the same (killed): the row goes on,
				// its checks hold for a crash as for a stop.
				r.note("graceful stop did not finish, node killed: %v", err)
			}
			down := time.Now()
			if err := r.su.rabbit.Start(90 * time.Second); err != nil {
				r.t.Fatalf("start rabbitmq: %v", err)
			}
			r.note("node stopped for %s (stopped → accepting connections again)", time.Since(down).Round(100*time.Millisecond))
		}},
		{name: "redis kill -9 + restart (AOF)", short: true, fault: func(r *run) {
			r.su.redis.Kill(r.t)
			time.Sleep(2 * time.Second)
			r.su.redis.Start(r.t)
		}},
		cutOff("splitworker cut from rabbitmq", "ORDERFLOW_AMQP_URL"),
		cutOff("splitworker cut from redis", "ORDERFLOW_REDIS_ADDR"),
		leasePause(),
		clockSkew(),
	}, append(append(append(newScenarios(), multiNodeScenarios()...), clusterScenarios()...), redisClusterScenarios()...)...)
}

// target is the host:port of the suite's Redis, or of its RabbitMQ node.
func (su *suite) target(amqpDep bool) string {
	if amqpDep {
		return strings.TrimSuffix(strings.TrimPrefix(su.rabbit.URL(), "amqp://guest:guest@"), "/")
	}
	return su.redis.Addr
}

// via is the address a service is given to reach a dependency through a
// proxy listening on addr.
func via(addr string, amqpDep bool) string {
	if amqpDep {
		return "amqp://guest:guest@" + addr + "/"
	}
	return addr
}

// cutOff points the split-worker's connection to a dependency (named by
// its environment variable) through a proxy of the suite's and cuts it
// for 30 s (5 s in `make test`).
func cutOff(name, envVar string) scenario {
	var p *netfault.Proxy
	return scenario{
		name: name, short: true,
		setup: func(su *suite, o *stacktest.Options) {
			amqpDep := envVar == "ORDERFLOW_AMQP_URL"
			var err error
			if p, err = netfault.NewProxy(su.target(amqpDep)); err != nil {
				panic(err)
			}
			o.ServiceEnv[stacktest.SplitWorker][envVar] = via(p.Addr(), amqpDep)
		},
		fault: func(r *run) {
			r.t.Cleanup(func() { _ = p.Close() })
			d := span(30*time.Second, 5*time.Second)
			p.Cut()
			time.Sleep(d)
			p.Restore()
			r.note("cut for %s", d)
		},
	}
}

// leasePause freezes one of two split-worker replicas (SIGSTOP) while it
// holds task leases, past its lease and past the broker's heartbeat
// timeout, so the other replica takes its jobs over; then lets it run
// again (SIGCONT). Its late writes must be refused by the fence, and no
// task may end FAILED 10009 (delivery limit, or job taken for lost):
// its jobs are healthy. In
// `make test` the pause is 10 s, within the heartbeat timeout (the broker
// keeps its deliveries): the other replica takes its tasks over from the
// jobs the repair sweeper republishes (grace 3 s).
func leasePause() scenario {
	return scenario{
		name: "splitworker paused past its lease", short: true,
		setup: func(_ *suite, o *stacktest.Options) {
			o.Replicas = map[string]int{stacktest.SplitWorker: 2}
			o.ServiceEnv[stacktest.SplitWorker]["ORDERFLOW_SPLITWORKER_LEASE"] = "2s"
			o.ServiceEnv[stacktest.SplitWorker]["ORDERFLOW_SPLITWORKER_LEASE_WAIT"] = "1s"
			if !full() {
				o.ServiceEnv[stacktest.Gateway]["ORDERFLOW_GATEWAY_REPAIR_GRACE"] = "3s"
			}
		},
		fault: func(r *run) {
			r.s.Pause(stacktest.SplitWorker)
			r.t.Cleanup(func() { r.s.Resume(stacktest.SplitWorker) })
			time.Sleep(span(35*time.Second, 10*time.Second))
			r.s.Resume(stacktest.SplitWorker)
		},
		check: func(r *run, res *result) {
			time.Sleep(2 * time.Second) // let the resumed replica log its refusals
			refused := countLines(r.s.LogPath(stacktest.SplitWorker), r.faultEnd,
				"result write fenced off", "task lease lost", "task finished elsewhere", "task already terminal")
			r.note("late writes refused by the fence: %d", refused)
			// The paused replica's tasks are healthy: none may end
			// FAILED 10009 because its jobs waited behind the pause.
			noneFailed10009(r, res, "a stopped replica's tasks are not the job's fault")
		},
	}
}

// noneFailed10009 fails the row if any accepted task ended FAILED 10009
// (delivery limit, or job taken for lost): the fault was the
// infrastructure's, not the job's, so its tasks must complete.
func noneFailed10009(r *run, res *result, why string) {
	r.note("tasks FAILED 10009: %d", res.deliveryLimit)
	if res.deliveryLimit > 0 {
		r.t.Errorf("tasks FAILED 10009 = %d, want 0: %s", res.deliveryLimit, why)
	}
}

// clockSkew runs two reconciler replicas whose clocks are 20 s behind
// and 20 s ahead for 10 s of load (4 s in `make test`); no query
// or close may run before its time in the schedule, measured from the
// payment's creation.
func clockSkew() scenario {
	return scenario{
		name: "reconciler replicas with clocks -20s/+20s", short: true,
		setup: func(_ *suite, o *stacktest.Options) {
			o.Replicas = map[string]int{stacktest.Reconciler: 2}
			o.ServiceEnv[stacktest.Reconciler]["ORDERFLOW_RECONCILER_CLOCK_SKEW"] = "-20s"
			o.ServiceEnv["reconciler-2"] = map[string]string{"ORDERFLOW_RECONCILER_CLOCK_SKEW": "20s"}
		},
		fault: func(*run) { time.Sleep(span(10*time.Second, 4*time.Second)) },
	}
}

func writePlatformKey(t *testing.T, dir string) string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "platform-key.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs one scenario and returns its row.
func (su *suite) run(t *testing.T, sc scenario) (result, *stacktest.Stack) {
	state := t.TempDir()
	o := stacktest.Options{
		RedisAddr: su.redis.Addr,
		AMQPURL:   su.rabbit.URL(),
		// Pools are capped so that "no connection leak" has a bound to
		// check: pooled connections grow with bursts up to the cap.
		Env: map[string]string{"ORDERFLOW_LOG_LEVEL": "info", "ORDERFLOW_REDIS_POOL_SIZE": strconv.Itoa(poolSize)},
		ServiceEnv: map[string]map[string]string{
			stacktest.Gateway: {"ORDERFLOW_GATEWAY_OUTBOX_GRACE": "3s"},
			stacktest.SplitWorker: {
				"ORDERFLOW_SPLITWORKER_LEASE": "5s", "ORDERFLOW_SPLITWORKER_LEASE_WAIT": "2s",
				"ORDERFLOW_SPLITWORKER_SLOT_LEASE": "5s", "ORDERFLOW_SPLITWORKER_REQUEUE_BACKOFF": "200ms",
				// A slot lease of at least 4 read timeouts can be renewed in time.
				"ORDERFLOW_REDIS_READ_TIMEOUT": "1s",
				// The fulfilment system's jobs end within 2.5 s: a slot
				// whose lease expired (a killed, paused or cut-off
				// replica's) is counted against N for JOB_MAX.
				"ORDERFLOW_SPLITWORKER_SHIPMENT_TIMEOUT": "5s", "ORDERFLOW_SPLITWORKER_JOB_MAX": "5s",
			},
			stacktest.Reconciler: {"ORDERFLOW_RECONCILE_SCHEDULE": joinDurations(schedule), "ORDERFLOW_RECONCILE_RETRY_BASE": "500ms"},
			stacktest.PaySim: {
				"ORDERFLOW_PAYSIM_MIN_CLOSE_AGE": "2s", "ORDERFLOW_PAYSIM_STATE_FILE": filepath.Join(state, "paysim.jsonl"),
				"ORDERFLOW_PAYSIM_PLATFORM_KEY_FILE": su.platformKey,
			},
			stacktest.Fulfilment: {
				"ORDERFLOW_FULFILMENT_STATE_FILE": filepath.Join(state, "fulfilment.jsonl"),
				"ORDERFLOW_FULFILMENT_CAPACITY":   "8",
			},
		},
		ReadyTimeout: 60 * time.Second,
	}
	su.current, su.primary = t, func() string { return su.redis.Addr }
	if sc.setup != nil {
		sc.setup(su, &o)
	}
	s := stacktest.Start(t, o)
	r := &run{t: t, su: su, s: s, l: newLoad(t, s, strings.ReplaceAll(s.Prefix(), "oft-", "c"))}
	res := result{name: sc.name}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); r.l.run(ctx, submitsPerSec, paysPerSec) }()
	time.Sleep(warmUp)
	res.before = su.gauges(t, r)
	r.faultStart = time.Now()
	sc.fault(r)
	r.faultEnd = time.Now()
	res.faultFor = r.faultEnd.Sub(r.faultStart)
	// The load goes on until a submission sent after the fault is
	// accepted (a replicated Redis takes writes again only once every
	// replica is back), then for afterFault more, so every row measures
	// its recovery and carries load past it.
	r.l.awaitAccepted(r.faultEnd, recoverDeadline)
	time.Sleep(afterFault)
	stop()
	<-loadDone
	r.l.wait()
	// A careful client sends a request answered with an error again
	// with its request id: that tells it the id of a task the error
	// answer left in doubt.
	r.l.retryErrors()
	res.settle(r)
	if sc.check != nil {
		sc.check(r, &res)
	}
	time.Sleep(time.Second)
	res.after = su.gauges(t, r)
	// A split-worker keeps its slot-pool grant subscription open for a
	// while after its last waiter left; one opened during the load (after
	// the first gauges) is not a leak unless it outlives that linger.
	for deadline := time.Now().Add(slotpool.SubscriptionLinger + 5*time.Second); res.after.subscribers > res.before.subscribers && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		res.after = su.gauges(t, r)
	}
	res.procs = len(s.Names())
	res.notes = r.notes
	return res, s
}

// keepLogs copies the stack's logs out of the test's temporary folder,
// which is deleted when the test ends.
func keepLogs(t *testing.T, s *stacktest.Stack) {
	dir, err := os.MkdirTemp("", "orderflow-chaos-logs-")
	if err != nil {
		return
	}
	for _, n := range s.Names() {
		if b, err := os.ReadFile(s.LogPath(n)); err == nil {
			_ = os.WriteFile(filepath.Join(dir, n+".log"), b, 0o644)
		}
	}
	t.Logf("logs kept in %s", dir)
}

// gauges are the leak indicators: the gateway's goroutines and the Redis
// connections of every process of the stack (on a cluster, of the node
// with the most), and those holding a subscription (pub/sub connections
// live outside the pools).
type gauges struct {
	goroutines, redisClients, subscribers int
	// subs describes each subscribed connection (the process holding it,
	// its age and channel counts), for the leak message.
	subs []string
}

func (su *suite) gauges(t *testing.T, r *run) gauges {
	r.l.http.Transport.(*http.Transport).CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	var g gauges
	resp, err := r.s.GetMetrics(stacktest.Gateway)
	if err == nil {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				g.goroutines = int(f)
			}
		}
		resp.Body.Close()
	}
	// A comma list: every node of a Redis Cluster. A cluster client has
	// a pool per node, so the pooled connections are those of the
	// busiest node; subscriptions, outside the pools, are counted on
	// every node.
	for _, addr := range strings.Split(su.primary(), ",") {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		list, err := rdb.ClientList(context.Background()).Result()
		rdb.Close()
		if err != nil {
			t.Logf("CLIENT LIST on %s: %v", addr, err)
		}
		clients := 0
		for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
			if line == "" || strings.Contains(line, "cmd=client|list") || !stackClient(line) {
				continue // this connection, a Sentinel's or a replica's
			}
			clients++
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				if (k == "sub" || k == "psub" || k == "ssub") && v != "0" {
					g.subscribers++
					g.subs = append(g.subs, describeSubscriber(line))
					break
				}
			}
		}
		g.redisClients = max(g.redisClients, clients)
	}
	return g
}

// describeSubscriber names the process holding a subscribed connection
// (from its local address, through ss) and the connection's age and
// channel counts, from its CLIENT LIST line.
func describeSubscriber(line string) string {
	var addr string
	var parts []string
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "addr":
			addr = v
		case "age", "sub", "psub", "ssub":
			parts = append(parts, f)
		}
	}
	owner := "unknown process"
	if out, err := exec.Command("ss", "-tnpH", "src", addr).Output(); err == nil {
		if _, users, ok := strings.Cut(string(out), "users:"); ok {
			owner = strings.TrimSpace(users)
		}
	}
	return addr + " " + owner + " " + strings.Join(parts, " ")
}

// stackClient reports whether a CLIENT LIST line is a connection of the
// stack's processes: not a replica's link (flags S, on its primary; M,
// on the replica) and not a Sentinel's
// (named sentinel-<id>-cmd or -pubsub; each Sentinel keeps a subscription
// on the primary, reconnected to a new one at its own pace after a
// failover, which read as a leaked subscriber).
func stackClient(line string) bool {
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		if (k == "flags" && strings.ContainsAny(v, "SM")) || (k == "name" && strings.HasPrefix(v, "sentinel-")) {
			return false
		}
	}
	return true
}

func joinDurations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.String())
	}
	return strings.Join(s, ",")
}

// countLines counts log lines written after since that contain any of
// the phrases.
func countLines(path string, since time.Time, phrases ...string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !slices.ContainsFunc(phrases, func(p string) bool { return strings.Contains(line, p) }) {
			continue
		}
		// slog JSON: "time":"2006-01-02T15:04:05.999999999Z07:00"
		if i := strings.Index(line, `"time":"`); i >= 0 {
			rest := line[i+8:]
			if j := strings.IndexByte(rest, '"'); j > 0 {
				if ts, err := time.Parse(time.RFC3339Nano, rest[:j]); err == nil && ts.Before(since) {
					continue
				}
			}
		}
		n++
	}
	return n
}
