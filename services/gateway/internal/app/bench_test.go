package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/serve"
	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// The ratio cells (submit and status) run orderflow and its baselines in
// benchRounds() interleaved rounds of benchRepeat each
// (benchrec.Interleave): a cell's ratio is the median of its per-round
// ratios, stated with their spread. Seven rounds, the default, are the
// fewest that give a 95 % confidence interval of a median (bench-compare);
// ORDERFLOW_BENCH_ROUNDS overrides it (make bench runs 5, make
// bench-quick 1).
const benchRepeat = 500 * time.Millisecond

func benchRounds() int { return benchrec.Rounds(7) }

var concurrencies = []int{1, 16, 64}

// benchChildTest is the test a pinned benchmark runs in a process of its
// own for the server side (the gateway or a baseline).
const benchChildTest = "TestBenchChild"

// benchGateway is the gateway under benchmark: in this process, or, in the
// pinned pass, in a child process on the server's core (this process then
// runs on the client's core).
type benchGateway struct {
	*stack
	pin    benchrec.Pin
	pinned bool
}

// gatewayInfo is what a gateway child tells its parent.
type gatewayInfo struct {
	HTTP, GRPC, Prefix string
	// Secret signs the benchmark's tokens.
	Secret string
}

// gatewayArgs are a gateway child's conditions.
type gatewayArgs struct {
	// Redis, when set, is the Redis the gateway uses instead of the shared
	// one.
	Redis string
}

// startBenchGateway starts the gateway for a benchmark, pinned when the
// run asks for it.
func startBenchGateway(b *testing.B, args gatewayArgs) *benchGateway {
	pin, pinned := benchrec.Pinning()
	if !pinned {
		return &benchGateway{stack: startGateway(b, args.mutate)}
	}
	pinSelf(b, pin.Client)
	var info gatewayInfo
	benchrec.StartChild(b, benchChildTest, "gateway", pin.Server, args, &info)
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	b.Cleanup(func() { rdb.Close() })
	var cfg Config
	cfg.JWT.Secret = config.Secret(info.Secret)
	return &benchGateway{pin: pin, pinned: true, stack: &stack{
		cfg: cfg, addrs: serve.Addrs{HTTP: info.HTTP, GRPC: info.GRPC}, names: jobqueue.NewNames(info.Prefix),
		amqp: conn, prefix: info.Prefix, store: taskstore.New(rdb, taskstore.Options{Prefix: info.Prefix}),
	}}
}

// mutate applies the arguments to the gateway's configuration.
func (a gatewayArgs) mutate(cfg *Config) {
	if a.Redis != "" {
		cfg.Redis.Addr = a.Redis
	}
}

// pinSelf moves every thread of this process to cpus until b ends.
func pinSelf(b *testing.B, cpus string) {
	was, err := benchrec.Affinity(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	if err := benchrec.PinProcess(os.Getpid(), cpus); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = benchrec.PinProcess(os.Getpid(), was) })
}

// TestBenchChild is the server side of a pinned benchmark; it runs only in
// a process started by benchrec.StartChild.
func TestBenchChild(t *testing.T) {
	switch benchrec.ChildRole() {
	case "":
		t.Skip("runs only as the server process of a pinned benchmark")
	case "gateway":
		var args gatewayArgs
		benchrec.ChildArgs(t, &args)
		s := startGateway(t, args.mutate)
		benchrec.Serve(t, gatewayInfo{HTTP: s.addrs.HTTP, GRPC: s.addrs.GRPC, Prefix: s.prefix, Secret: s.cfg.JWT.Secret.Reveal()})
	case "status-floors":
		var args struct{ Key string }
		benchrec.ChildArgs(t, &args)
		rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), PoolSize: 128})
		defer rdb.Close()
		httpAddr, grpcAddr := startStatusFloors(t, rdb, args.Key)
		benchrec.Serve(t, floorInfo{HTTP: httpAddr, GRPC: grpcAddr})
	case "submit-floors":
		var args submitBaselineArgs
		benchrec.ChildArgs(t, &args)
		httpAddr, grpcAddr := startSubmitFloors(t, args)
		benchrec.Serve(t, floorInfo{HTTP: httpAddr, GRPC: grpcAddr})
	case "submit-baseline":
		var args submitBaselineArgs
		benchrec.ChildArgs(t, &args)
		benchrec.Serve(t, floorInfo{HTTP: serveSubmitBaseline(t, args)})
	default:
		t.Fatalf("unknown role %q", benchrec.ChildRole())
	}
}

// figure records a cell measured in interleaved repeats rs: its value is
// the median of the repeats' rates. bases, when not nil, are the repeats
// of its baseline from the same rounds; the ratio is then the median of
// the per-round ratios. Against a like-for-like minimal server the goal
// is at least 0.9; the ratio to the bare engine loop is printed only.
func figure(b *testing.B, group, name string, conc int, pinned bool, rs []benchrec.Result, baseName string, bases []benchrec.Result) {
	r, rates := benchrec.Merge(rs), benchrec.Rates(rs)
	f := benchrec.Figure{
		Group: group, Name: name, Params: fmt.Sprintf("clients=%d", conc), Value: benchrec.Median(rates), Unit: "ops/s",
		Samples: rates, Dist: benchrec.Dist(r.Latencies, "ms"), DistUnit: "ms", Pinned: pinned,
	}
	if bases != nil {
		baseRates := benchrec.Rates(bases)
		f.Baseline = &benchrec.Baseline{Name: baseName, Value: benchrec.Median(baseRates), Samples: baseRates}
		f.RatioPairs = benchrec.PairRatios(rates, baseRates)
		if strings.HasPrefix(baseName, "minimal ") {
			f.Goals = []benchrec.Goal{benchrec.AtLeast("ratio", 0.9)}
		}
	}
	if r.Errors > 0 {
		f.Note = fmt.Sprintf("%d errors, the first: %v", r.Errors, r.FirstError)
	}
	benchrec.Record(b, f)
}

func purge(b *testing.B, s *stack) {
	ch, err := s.amqp.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueuePurge(s.names.Queue, false); err != nil {
		b.Fatal(err)
	}
}

// submitBaselineArgs are the conditions of the submit baseline.
type submitBaselineArgs struct {
	Prefix, Exchange string
	Job              []byte
	Conc             int
	// D is how long one measurement runs.
	D time.Duration
}

// serveSubmitBaseline serves the submit baseline on a loopback port until
// tb ends: each POST of submitBaselineArgs (JSON) measures it once for
// those conditions and answers the benchrec.Result, so that the pinned
// pass can run it in the server's process once per interleaved round.
func serveSubmitBaseline(tb testing.TB, base submitBaselineArgs) (addr string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		args := base
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := submitBaseline(r.Context(), args)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(res)
	})}
	go srv.Serve(lis)
	tb.Cleanup(func() { srv.Close() })
	return lis.Addr().String()
}

// measureSubmitBaseline asks a submit baseline server (serveSubmitBaseline)
// for one measurement.
func measureSubmitBaseline(tb testing.TB, addr string, args submitBaselineArgs) benchrec.Result {
	data, err := json.Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(string(data)))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		tb.Fatalf("submit baseline: %s: %s", resp.Status, msg)
	}
	var res benchrec.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		tb.Fatal(err)
	}
	return res
}

// submitBaseline is what a submission must do at the least: a Redis write
// of the task and a confirmed publish of the job, one confirm-mode
// channel per client.
func submitBaseline(ctx context.Context, a submitBaselineArgs) (benchrec.Result, error) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), PoolSize: 128})
	defer rdb.Close()
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		return benchrec.Result{}, err
	}
	defer conn.Close()
	chans := make([]*amqp.Channel, a.Conc)
	for i := range chans {
		ch, err := conn.Channel()
		if err != nil {
			return benchrec.Result{}, err
		}
		if err := ch.Confirm(false); err != nil {
			return benchrec.Result{}, err
		}
		chans[i] = ch
	}
	seq := make([]int, a.Conc)
	return benchrec.Measure(a.Conc, a.D, func(w int) error {
		seq[w]++
		key := fmt.Sprintf("%s:baseline:%d:%d", a.Prefix, w, seq[w])
		if err := rdb.HSet(ctx, key, "s", 1, "d", a.Job).Err(); err != nil {
			return err
		}
		if err := rdb.Expire(ctx, key, time.Minute).Err(); err != nil {
			return err
		}
		dc, err := chans[w].PublishWithDeferredConfirm(a.Exchange, jobqueue.RoutingKey, true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: a.Job})
		if err != nil {
			return err
		}
		if !dc.Wait() {
			return fmt.Errorf("nack")
		}
		return nil
	}), nil
}

// submitFloor is the least a submission server does: decode the order,
// write the task to Redis (one pipelined HSET and EXPIRE) and publish the
// job on a confirm-mode channel of its own for the publish, waiting for
// the confirm. No authentication, validation, outbox or logging.
type submitFloor struct {
	gatewayv1.UnimplementedOrderSplitServiceServer
	rdb      *redis.Client
	chans    chan *amqp.Channel
	prefix   string
	exchange string
	seq      atomic.Int64
}

func (f *submitFloor) submit(ctx context.Context, req *gatewayv1.CreateOrderSplitRequest) (*gatewayv1.CreateOrderSplitResponse, error) {
	job, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("floor-%d", f.seq.Add(1))
	key := f.prefix + ":floor:" + id
	if _, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "s", 1, "d", job)
		p.Expire(ctx, key, time.Minute)
		return nil
	}); err != nil {
		return nil, err
	}
	ch := <-f.chans
	defer func() { f.chans <- ch }()
	dc, err := ch.PublishWithDeferredConfirm(f.exchange, jobqueue.RoutingKey, true, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: job})
	if err != nil {
		return nil, err
	}
	if !dc.Wait() {
		return nil, fmt.Errorf("nack")
	}
	return &gatewayv1.CreateOrderSplitResponse{Task: &taskv1.Task{TaskId: id, OrderCode: req.GetOrderCode(), Status: taskv1.TaskStatus_TASK_STATUS_PROCESSING}}, nil
}

func (f *submitFloor) CreateOrderSplit(ctx context.Context, req *gatewayv1.CreateOrderSplitRequest) (*gatewayv1.CreateOrderSplitResponse, error) {
	return f.submit(ctx, req)
}

// startSubmitFloors starts the like-for-like baselines of a submission,
// each behind a client hop as the gateway is: a minimal net/http server
// (JSON in and out) and a minimal grpc-go server doing submitFloor's work.
func startSubmitFloors(tb testing.TB, a submitBaselineArgs) (httpAddr, grpcAddr string) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), PoolSize: 128})
	tb.Cleanup(func() { rdb.Close() })
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	f := &submitFloor{rdb: rdb, chans: make(chan *amqp.Channel, 128), prefix: a.Prefix, exchange: a.Exchange}
	for range cap(f.chans) {
		ch, err := conn.Channel()
		if err != nil {
			tb.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			tb.Fatal(err)
		}
		f.chans <- ch
	}
	handler := func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req gatewayv1.CreateOrderSplitRequest
		if err := protojson.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := f.submit(r.Context(), &req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		out, _ := protojson.Marshal(resp.GetTask())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}
	return serveFloors(tb, handler, func(gs *grpc.Server) { gatewayv1.RegisterOrderSplitServiceServer(gs, f) })
}

// BenchmarkSubmit compares order-split submission over REST and gRPC with
// a plain client doing the same work (a Redis write of the task and a
// confirmed publish of the job) at the same concurrency. In the pinned
// pass the gateway and the baseline each run on the server's core, the
// REST and gRPC clients on the client's.
func BenchmarkSubmit(b *testing.B) {
	s := startBenchGateway(b, gatewayArgs{})
	tok := s.token(b, "bench")
	body := `{"orderCode":"ORD-B","items":[{"itemCode":"i1","sku":"SKU-1","quantity":2},{"itemCode":"i2","sku":"SKU-2","quantity":1}]}`
	job := &gatewayv1.CreateOrderSplitRequest{OrderCode: "ORD-B", Items: []*taskv1.OrderItem{{ItemCode: "i1", Sku: "SKU-1", Quantity: 2}, {ItemCode: "i2", Sku: "SKU-2", Quantity: 1}}}
	jobBytes, _ := proto.Marshal(job)

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}}
	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	grpcClient := gatewayv1.NewOrderSplitServiceClient(conn)
	gctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)

	floorArgs := submitBaselineArgs{Prefix: s.prefix, Exchange: s.names.Exchange, Job: jobBytes, D: benchRepeat}
	var floors, baseline floorInfo
	if s.pinned {
		benchrec.StartChild(b, benchChildTest, "submit-floors", s.pin.Server, floorArgs, &floors)
		benchrec.StartChild(b, benchChildTest, "submit-baseline", s.pin.Server, floorArgs, &baseline)
	} else {
		floors.HTTP, floors.GRPC = startSubmitFloors(b, floorArgs)
		baseline.HTTP = serveSubmitBaseline(b, floorArgs)
	}
	fconn, err := grpc.NewClient(floors.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer fconn.Close()
	floorClient := gatewayv1.NewOrderSplitServiceClient(fconn)
	post := func(url string) func(int) error {
		return func(int) error {
			req, _ := http.NewRequest("POST", url, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}

	fmt.Printf("\nSubmit throughput (%d interleaved rounds of %v per cell; ratio = vs plain Redis write + confirmed publish, and vs a minimal server doing it; pinned: %v)\n",
		benchRounds(), benchRepeat, s.pinned)
	const baseName = "Redis write + confirmed publish"
	const httpFloorName, grpcFloorName = "minimal net/http server, same Redis write + confirmed publish", "minimal grpc-go server, same Redis write + confirmed publish"
	for _, conc := range concurrencies {
		// Each arm starts from an empty queue.
		arm := func(op func() benchrec.Result) func() benchrec.Result {
			return func() benchrec.Result { purge(b, s.stack); return op() }
		}
		measure := func(op func(int) error) func() benchrec.Result {
			return arm(func() benchrec.Result { return benchrec.Measure(conc, benchRepeat, op) })
		}
		args := floorArgs
		args.Conc = conc
		// Each orderflow arm sits next to its baselines: the REST arm
		// between its minimal server and the plain loop, the gRPC arm
		// between the plain loop and its minimal server.
		res := benchrec.Interleave(benchRounds(),
			measure(post("http://"+floors.HTTP+"/")),
			measure(post("http://"+s.addrs.HTTP+"/v1/order-splits")),
			arm(func() benchrec.Result { return measureSubmitBaseline(b, baseline.HTTP, args) }),
			measure(func(int) error {
				_, err := grpcClient.CreateOrderSplit(gctx, job)
				return err
			}),
			measure(func(int) error {
				_, err := floorClient.CreateOrderSplit(gctx, job)
				return err
			}),
		)
		purge(b, s.stack)
		httpFloor, rest, base, grpcRes, grpcFloor := res[0], res[1], res[2], res[3], res[4]
		figure(b, "submit", "baseline: "+baseName, conc, s.pinned, base, "", nil)
		figure(b, "submit", "REST POST /v1/order-splits", conc, s.pinned, rest, baseName, base)
		figure(b, "submit", "gRPC CreateOrderSplit", conc, s.pinned, grpcRes, baseName, base)
		figure(b, "submit", "baseline: "+httpFloorName, conc, s.pinned, httpFloor, "", nil)
		figure(b, "submit", "REST POST /v1/order-splits vs a minimal server", conc, s.pinned, rest, httpFloorName, httpFloor)
		figure(b, "submit", "baseline: "+grpcFloorName, conc, s.pinned, grpcFloor, "", nil)
		figure(b, "submit", "gRPC CreateOrderSplit vs a minimal server", conc, s.pinned, grpcRes, grpcFloorName, grpcFloor)
	}
}

// floorInfo is where the status floors listen.
type floorInfo struct{ HTTP, GRPC string }

// floorTasks is the gRPC status floor: grpc-go with nothing but the same
// Redis read and the protobuf decode of the task.
type floorTasks struct {
	gatewayv1.UnimplementedTaskServiceServer
	rdb *redis.Client
	key string
}

func (f floorTasks) GetTask(ctx context.Context, _ *gatewayv1.GetTaskRequest) (*gatewayv1.GetTaskResponse, error) {
	data, err := f.rdb.HGet(ctx, f.key, "d").Bytes()
	if err != nil {
		return nil, err
	}
	var t taskv1.Task
	if err := proto.Unmarshal(data, &t); err != nil {
		return nil, err
	}
	return &gatewayv1.GetTaskResponse{Task: &t}, nil
}

// startStatusFloors starts the two baselines of a status read: a minimal
// net/http server doing the same Redis read and writing the task as JSON,
// and a minimal grpc-go server doing the same read.
func startStatusFloors(tb testing.TB, rdb *redis.Client, key string) (httpAddr, grpcAddr string) {
	handler := func(w http.ResponseWriter, r *http.Request) {
		data, err := rdb.HGet(r.Context(), key, "d").Bytes()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		var t taskv1.Task
		if err := proto.Unmarshal(data, &t); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		out, _ := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(&t)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}
	return serveFloors(tb, handler, func(gs *grpc.Server) {
		gatewayv1.RegisterTaskServiceServer(gs, floorTasks{rdb: rdb, key: key})
	})
}

// serveFloors serves a floor's net/http handler and its grpc-go service
// on loopback ports of their own until tb ends.
func serveFloors(tb testing.TB, handler http.HandlerFunc, register func(*grpc.Server)) (httpAddr, grpcAddr string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	floor := &http.Server{Handler: handler}
	go floor.Serve(lis)
	tb.Cleanup(func() { floor.Close() })
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	go gs.Serve(glis)
	tb.Cleanup(gs.Stop)
	return lis.Addr().String(), glis.Addr().String()
}

// BenchmarkStatus compares reading a task over REST with a minimal
// net/http server doing the same Redis read and writing the JSON, and over
// gRPC with a minimal grpc-go server doing the same Redis read; a plain
// Redis read loop is printed beside them. In the pinned pass the gateway
// and both floors run on the server's core, every client on the client's.
func BenchmarkStatus(b *testing.B) {
	s := startBenchGateway(b, gatewayArgs{})
	tok := s.token(b, "bench")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}}
	id := createTask(b, hc, s.addrs.HTTP, tok, "ORD-S")
	key := s.store.TaskKey("bench", id)

	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), PoolSize: 128})
	defer rdb.Close()
	var floors floorInfo
	if s.pinned {
		benchrec.StartChild(b, benchChildTest, "status-floors", s.pin.Server, map[string]string{"key": key}, &floors)
	} else {
		floors.HTTP, floors.GRPC = startStatusFloors(b, rdb, key)
	}

	gconn := func(addr string) gatewayv1.TaskServiceClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		return gatewayv1.NewTaskServiceClient(conn)
	}
	tc, floorTC := gconn(s.addrs.GRPC), gconn(floors.GRPC)
	gctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	get := func(url string, auth bool) func(int) error {
		return func(int) error {
			req, _ := http.NewRequest("GET", url, nil)
			if auth {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}
	getTask := func(c gatewayv1.TaskServiceClient) func(int) error {
		return func(int) error {
			_, err := c.GetTask(gctx, &gatewayv1.GetTaskRequest{TaskId: id})
			return err
		}
	}

	fmt.Printf("\nStatus reads (%d interleaved rounds of %v per cell; pinned: %v)\n", benchRounds(), benchRepeat, s.pinned)
	const httpFloorName, grpcFloorName = "minimal net/http server, same Redis read + JSON", "minimal grpc-go server, same Redis read"
	for _, conc := range concurrencies {
		measure := func(op func(int) error) func() benchrec.Result {
			return func() benchrec.Result { return benchrec.Measure(conc, benchRepeat, op) }
		}
		// Each orderflow arm sits next to its floor.
		res := benchrec.Interleave(benchRounds(),
			measure(func(int) error { return rdb.HGet(context.Background(), key, "d").Err() }),
			measure(getTask(floorTC)),
			measure(getTask(tc)),
			measure(get("http://"+floors.HTTP+"/", false)),
			measure(get("http://"+s.addrs.HTTP+"/v1/tasks/"+id, true)),
		)
		plain, grpcFloor, grpcRes, httpFloor, rest := res[0], res[1], res[2], res[3], res[4]
		figure(b, "status", "plain Redis HGET loop (no server)", conc, s.pinned, plain, "", nil)
		figure(b, "status", "baseline: "+grpcFloorName, conc, s.pinned, grpcFloor, "", nil)
		figure(b, "status", "gRPC GetTask", conc, s.pinned, grpcRes, grpcFloorName, grpcFloor)
		figure(b, "status", "baseline: "+httpFloorName, conc, s.pinned, httpFloor, "", nil)
		figure(b, "status", "REST GET /v1/tasks/{id}", conc, s.pinned, rest, httpFloorName, httpFloor)
	}
}

// createTask submits a one-item order over REST and returns its task id.
func createTask(b *testing.B, hc *http.Client, addr, tok, order string) string {
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/order-splits",
		strings.NewReader(`{"orderCode":"`+order+`","items":[{"itemCode":"i1","sku":"SKU-1","quantity":2}]}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var created map[string]any
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(raw, &created); err != nil {
		b.Fatalf("create: %s: %v", raw, err)
	}
	id, ok := created["taskId"].(string)
	if !ok {
		b.Fatalf("create: no taskId in %s", raw)
	}
	return id
}
