package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/logging"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

const deliveryLimit = 2

// env is one test's isolated world: a Redis prefix, RabbitMQ objects of
// its own, a fulfilment simulator and a publisher.
type env struct {
	t      testing.TB
	rdb    *redis.Client
	prefix string
	store  *taskstore.Store
	names  jobqueue.Names
	pub    *amqpbus.Publisher
	sim    *fulfilmentsim.Server
	simURL string
	// simServer serves sim at simURL (see simDown and simUp).
	simServer *httptest.Server
	fc        *fulfilment.Client
	log       *slog.Logger
	// slots is the fulfilment system's N, shared by every worker replica
	// through the Redis running pool.
	slots int
	// consume, when its Concurrency is set, replaces the workers' default
	// consume options (prefetch 8, concurrency 4).
	consume worker.ConsumeOptions
	// redisAddr is the Redis the workers use.
	redisAddr string
	// graceful makes stop wait for the worker before closing its
	// connection.
	graceful bool
	// reg, when set, gets the workers' metrics.
	reg prometheus.Registerer
	// slotLease is the running pool's lease (2 s when zero).
	slotLease time.Duration
	// jobLimit is the running pool's job limit (slotpool.Options.JobLimit,
	// the service's ORDERFLOW_SPLITWORKER_JOB_MAX): a reclaimed slot stays
	// taken that long. None when zero.
	jobLimit time.Duration
	// shards splits the running pool over that many shard pools
	// (slotpool.Sharded) when above 1.
	shards int
	// wrapSlots, when set, wraps each worker's running pool.
	wrapSlots func(worker.Slots) worker.Slots
	// jobs records when each fulfilment job was created and first seen
	// finished by a poll.
	jobs jobTimes
	// catalogueReads counts the catalogue reads the simulator answered.
	catalogueReads atomic.Int64
}

// jobTimes records, per fulfilment job, when the request that created it
// and the first poll that found it finished arrived.
type jobTimes struct {
	mu      sync.Mutex
	created map[string]time.Time
	seen    map[string]time.Time
}

// serve passes r to h, recording job creations and finished polls.
func (j *jobTimes) serve(h http.Handler, w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	rec := &bodyTee{ResponseWriter: w}
	h.ServeHTTP(rec, r)
	var job fulfilment.Job
	if r.URL.Path != "/shipments" && !strings.HasPrefix(r.URL.Path, "/shipments/") || json.Unmarshal(rec.body, &job) != nil || job.JobID == "" {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.created == nil {
		j.created, j.seen = map[string]time.Time{}, map[string]time.Time{}
	}
	switch {
	case r.Method == http.MethodPost:
		if _, ok := j.created[job.JobID]; !ok {
			j.created[job.JobID] = arrived
		}
	case job.Done():
		if _, ok := j.seen[job.JobID]; !ok {
			j.seen[job.JobID] = arrived
		}
	}
}

// seenAfter returns, for each job finished and created, in creation
// order, how long after its creation it was first seen finished.
func (j *jobTimes) seenAfter() []time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	type job struct{ created, seen time.Time }
	var all []job
	for id, c := range j.created {
		if s, ok := j.seen[id]; ok {
			all = append(all, job{c, s})
		}
	}
	slices.SortFunc(all, func(a, b job) int { return a.created.Compare(b.created) })
	out := make([]time.Duration, len(all))
	for i, x := range all {
		out[i] = x.seen.Sub(x.created)
	}
	return out
}

// bodyTee keeps a copy of the body written.
type bodyTee struct {
	http.ResponseWriter
	body []byte
}

func (b *bodyTee) Write(p []byte) (int, error) {
	b.body = append(b.body, p...)
	return b.ResponseWriter.Write(p)
}

// poolName is the running pool of the test's fulfilment system.
func (e *env) poolName() string { return e.prefix + ":fulfilment" }

func amqpConfig() amqpbus.Config {
	return amqpbus.Config{URL: config.Secret(testenv.AMQPURL()), DialTimeout: 3 * time.Second,
		PublishTimeout: 5 * time.Second, PublishChannels: 8}
}

func newEnv(t testing.TB, simOpts fulfilmentsim.Options) *env {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	return newEnvWith(t, simOpts, rdb, prefix, testenv.RedisAddr())
}

// newEnvOn is newEnv on a Redis server of the test's own, which the test
// may stop and start.
func newEnvOn(t testing.TB, simOpts fulfilmentsim.Options, srv *testenv.RedisServer) *env {
	t.Helper()
	// One dial per attempt, as the services' clients (redisconn): with
	// go-redis's default of five, a pipeline to a stopped server takes
	// over 3 s to fail, longer than some outages the tests make.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return newEnvWith(t, simOpts, rdb, testenv.Prefix(t), srv.Addr)
}

func newEnvWith(t testing.TB, simOpts fulfilmentsim.Options, rdb *redis.Client, prefix, addr string) *env {
	t.Helper()
	e := &env{t: t, rdb: rdb, prefix: prefix, names: jobqueue.NewNames(prefix), slots: simOpts.Capacity, redisAddr: addr}
	if e.slots == 0 {
		e.slots = 4
	}
	t.Cleanup(func() { testenv.DeletePrefix(context.Background(), rdb, "{"+e.poolName()+"}") })
	e.log = logging.New(t.Output(), slog.LevelDebug, "splitworker")
	e.store = taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	e.sim = fulfilmentsim.New(simOpts)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/catalogue" {
			e.catalogueReads.Add(1)
		}
		e.jobs.serve(e.sim, w, r)
	}))
	t.Cleanup(func() { e.simServer.Close() })
	e.simServer, e.simURL = srv, srv.URL
	e.fc = fulfilment.NewClient(srv.URL, nil)

	conn := amqpbus.New(amqpConfig(), e.log, e.names.Topology(deliveryLimit))
	if err := conn.Check(); err != nil {
		t.Fatalf("rabbitmq: %v", err)
	}
	e.pub = amqpbus.NewPublisher(conn)
	t.Cleanup(func() {
		e.pub.Close()
		if ch, err := conn.Channel(); err == nil {
			for _, q := range e.names.Queues() {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			_ = ch.ExchangeDelete(e.names.Exchange, false, false)
			_ = ch.ExchangeDelete(e.names.DLX, false, false)
		}
		_ = conn.Close()
	})
	return e
}

// start runs a worker with its own RabbitMQ connection; stop cancels it
// and closes the connection at once (so its unacked deliveries return to
// the queue, as when the process dies) and waits for it — or, when the env
// is graceful, waits for the worker to return before closing the
// connection, as the service does on SIGTERM.
func (e *env) start(opts worker.Options) (w *worker.Worker, stop func()) {
	e.t.Helper()
	if opts.Lease == 0 {
		opts.Lease = 2 * time.Second
	}
	if opts.LeaseWait == 0 {
		opts.LeaseWait = time.Second
	}
	if opts.OutageHold == 0 {
		// Short, so the tests of the delivery limit stay short.
		opts.OutageHold = 200 * time.Millisecond
	}
	if opts.PollInitial == 0 {
		opts.PollInitial = 10 * time.Millisecond
		opts.PollMax = 50 * time.Millisecond
		opts.RequeueBackoff = 10 * time.Millisecond
	}
	// Each replica has its own Redis client, task store and pool handle,
	// as separate processes would.
	rdb := redis.NewClient(&redis.Options{Addr: e.redisAddr, DialerRetries: 1})
	store := taskstore.New(rdb, taskstore.Options{Prefix: e.prefix, TTL: time.Hour})
	slotLease := e.slotLease
	if slotLease == 0 {
		slotLease = 2 * time.Second
	}
	pool := slotpool.NewSharded(rdb, slotpool.Options{Name: e.poolName(), Capacity: e.slots, Lease: slotLease, JobLimit: e.jobLimit}, e.shards)
	var slots worker.Slots = worker.PoolSlots{Pool: pool}
	if e.wrapSlots != nil {
		slots = e.wrapSlots(slots)
	}
	w = worker.New(store, e.fc, slots, e.log, e.reg, opts)
	conn := amqpbus.New(amqpConfig(), e.log, e.names.Topology(deliveryLimit))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = pool.Run(ctx) })
	consume := worker.ConsumeOptions{Prefetch: 8, Concurrency: 4}
	if e.consume.Concurrency > 0 {
		consume = e.consume
	}
	consume.Names = e.names
	wg.Go(func() { _ = w.Run(ctx, conn, consume) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if !e.graceful {
				_ = conn.Close()
			}
			wg.Wait()
			_ = conn.Close()
			_ = rdb.Close()
		})
	}
	e.t.Cleanup(stop)
	return w, stop
}

func item(code, sku string, qty int32) *taskv1.OrderItem {
	return &taskv1.OrderItem{ItemCode: code, Sku: sku, Quantity: qty}
}

// demoOrder is the sample order of the default catalogue: two shipments
// (Beijing, Shanghai), A4 unknown SKU, A5 out of stock.
func demoOrder() []*taskv1.OrderItem {
	return []*taskv1.OrderItem{
		item("A1", "SKU-TEA-500G", 2), item("A2", "SKU-RICE-10KG", 1), item("A3", "SKU-KETTLE", 1),
		item("A4", "SKU-NOPE", 1), item("A5", "SKU-LAST-ONE", 3), item("A6", "SKU-OIL-5L", 2),
	}
}

// create records a PROCESSING task and returns its job.
func (e *env) create(member, orderCode string, items ...*taskv1.OrderItem) *jobv1.SplitJob {
	e.t.Helper()
	id, err := taskstore.NewID()
	if err != nil {
		e.t.Fatal(err)
	}
	job := &jobv1.SplitJob{TaskId: id, MemberId: member,
		OrderCode: orderCode, Items: items, SubmitTime: timestamppb.Now()}
	msg, err := jobqueue.Encode(context.Background(), job)
	if err != nil {
		e.t.Fatal(err)
	}
	task := &taskv1.Task{TaskId: id, Kind: taskv1.TaskKind_TASK_KIND_ORDER_SPLIT, OrderCode: orderCode}
	if _, _, err := e.store.Create(context.Background(), member, task, msg.Body); err != nil {
		e.t.Fatal(err)
	}
	return job
}

// publish sends job to the split queue.
func (e *env) publish(job *jobv1.SplitJob) {
	e.t.Helper()
	job.SubmitTime = timestamppb.Now()
	msg, err := jobqueue.Encode(context.Background(), job)
	if err != nil {
		e.t.Fatal(err)
	}
	e.publishRaw(msg)
}

func (e *env) publishRaw(msg amqp.Publishing) {
	e.t.Helper()
	if err := e.pub.Publish(context.Background(), e.names.Exchange, jobqueue.RoutingKey, msg); err != nil {
		e.t.Fatalf("publish: %v", err)
	}
}

// submit creates and publishes a task.
func (e *env) submit(member, orderCode string, items ...*taskv1.OrderItem) *jobv1.SplitJob {
	e.t.Helper()
	job := e.create(member, orderCode, items...)
	e.publish(job)
	return job
}

// wait polls the task until it is terminal.
func (e *env) wait(job *jobv1.SplitJob) *taskv1.Task {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		task, err := e.store.Get(context.Background(), job.GetMemberId(), job.GetTaskId())
		if err != nil {
			e.t.Fatalf("Get(%s) error = %v", job.GetTaskId(), err)
		}
		if task.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			return task
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("task %s still PROCESSING after 20s", job.GetTaskId())
	return nil
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, what, cond)
}

// bareChannel opens a plain amqp091 channel on a connection of its own,
// closed when the test ends.
func bareChannel(t testing.TB) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(amqpConfig().URL.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// simDown closes the fulfilment simulator's listener and connections: a
// connection to it is then refused, as when the system is down.
func (e *env) simDown() { e.simServer.Close() }

// simUp serves the fulfilment simulator again on its address.
func (e *env) simUp() {
	e.t.Helper()
	l, err := net.Listen("tcp", e.simServer.Listener.Addr().String())
	if err != nil {
		e.t.Fatalf("listen on the simulator's address again: %v", err)
	}
	srv := httptest.NewUnstartedServer(e.simServer.Config.Handler)
	srv.Listener = l
	srv.Start()
	e.simServer = srv
}
