package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
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
	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// benchDuration is how long each cell of a benchmark table runs.
const benchDuration = 2 * time.Second

// result is one measured cell.
type result struct {
	ops      int64
	elapsed  time.Duration
	p50, p99 time.Duration
	errors   int64
}

func (r result) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// measure runs op from conc goroutines for d and records latencies.
func measure(conc int, d time.Duration, op func(worker int) error) result {
	var ops, errs atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := op(w); err != nil {
					errs.Add(1)
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{ops: ops.Load(), elapsed: time.Since(start), errors: errs.Load()}
	if len(all) > 0 {
		r.p50 = all[len(all)/2]
		r.p99 = all[len(all)*99/100]
	}
	return r
}

func printRow(name string, conc int, r, base result) {
	ratio := 0.0
	if base.rate() > 0 {
		ratio = r.rate() / base.rate()
	}
	fmt.Printf("  %-28s conc=%-3d %9.0f ops/s  p50=%-9v p99=%-9v ratio=%.2f errors=%d\n",
		name, conc, r.rate(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), ratio, r.errors)
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

var concurrencies = []int{1, 16, 64}

// BenchmarkSubmit compares order-split submission over REST and gRPC with
// a plain client doing the same work (a Redis write of the task and a
// confirmed publish of the job) at the same concurrency.
func BenchmarkSubmit(b *testing.B) {
	s := startGateway(b, nil)
	tok := s.token(b, "bench")
	body := `{"orderCode":"ORD-B","items":[{"itemCode":"i1","sku":"SKU-1","quantity":2},{"itemCode":"i2","sku":"SKU-2","quantity":1}]}`
	job := &gatewayv1.CreateOrderSplitRequest{OrderCode: "ORD-B", Items: []*taskv1.OrderItem{{ItemCode: "i1", Sku: "SKU-1", Quantity: 2}, {ItemCode: "i2", Sku: "SKU-2", Quantity: 1}}}
	jobBytes, _ := proto.Marshal(job)

	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), PoolSize: 128})
	defer rdb.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}}
	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	grpcClient := gatewayv1.NewOrderSplitServiceClient(conn)
	gctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)

	fmt.Printf("\nSubmit throughput (%v per cell; ratio = vs plain Redis write + confirmed publish)\n", benchDuration)
	for _, conc := range concurrencies {
		// Baseline: one confirm-mode channel per goroutine.
		chans := make([]*amqp.Channel, conc)
		for i := range chans {
			ch, err := s.amqp.Channel()
			if err != nil {
				b.Fatal(err)
			}
			if err := ch.Confirm(false); err != nil {
				b.Fatal(err)
			}
			chans[i] = ch
		}
		var seq atomic.Int64
		base := measure(conc, benchDuration, func(w int) error {
			key := fmt.Sprintf("%s:baseline:%d", s.prefix, seq.Add(1))
			if err := rdb.HSet(context.Background(), key, "s", 1, "d", jobBytes).Err(); err != nil {
				return err
			}
			if err := rdb.Expire(context.Background(), key, time.Minute).Err(); err != nil {
				return err
			}
			dc, err := chans[w].PublishWithDeferredConfirm(s.names.Exchange, jobqueue.RoutingKey, true, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: jobBytes})
			if err != nil {
				return err
			}
			if !dc.Wait() {
				return fmt.Errorf("nack")
			}
			return nil
		})
		for _, ch := range chans {
			ch.Close()
		}
		purge(b, s)
		rest := measure(conc, benchDuration, func(int) error {
			req, _ := http.NewRequest("POST", "http://"+s.addrs.HTTP+"/v1/order-splits", strings.NewReader(body))
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
		})
		purge(b, s)
		grpcRes := measure(conc, benchDuration, func(int) error {
			_, err := grpcClient.CreateOrderSplit(gctx, job)
			return err
		})
		purge(b, s)
		printRow("baseline redis+publish", conc, base, base)
		printRow("REST POST /v1/order-splits", conc, rest, base)
		printRow("gRPC CreateOrderSplit", conc, grpcRes, base)
	}
}

// BenchmarkStatus compares reading a task over gRPC with a plain Redis GET
// loop, and over REST with a minimal net/http handler doing the same Redis
// GET and writing the JSON.
func BenchmarkStatus(b *testing.B) {
	s := startGateway(b, nil)
	tok := s.token(b, "bench")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}}
	req, _ := http.NewRequest("POST", "http://"+s.addrs.HTTP+"/v1/order-splits",
		strings.NewReader(`{"orderCode":"ORD-S","items":[{"itemCode":"i1","sku":"SKU-1","quantity":2}]}`))
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
	id := created["taskId"].(string)
	key := s.store.TaskKey("bench", id)

	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), PoolSize: 128})
	defer rdb.Close()
	// The REST floor: a minimal handler doing the same Redis read and JSON.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	floor := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	})}
	go floor.Serve(lis)
	defer floor.Close()

	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	tc := gatewayv1.NewTaskServiceClient(conn)
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

	fmt.Printf("\nStatus reads (%v per cell)\n", benchDuration)
	for _, conc := range concurrencies {
		plain := measure(conc, benchDuration, func(int) error {
			return rdb.HGet(context.Background(), key, "d").Err()
		})
		grpcRes := measure(conc, benchDuration, func(int) error {
			_, err := tc.GetTask(gctx, &gatewayv1.GetTaskRequest{TaskId: id})
			return err
		})
		httpFloor := measure(conc, benchDuration, get("http://"+lis.Addr().String()+"/", false))
		rest := measure(conc, benchDuration, get("http://"+s.addrs.HTTP+"/v1/tasks/"+id, true))
		printRow("plain Redis GET loop", conc, plain, plain)
		printRow("gRPC GetTask", conc, grpcRes, plain)
		printRow("net/http GET+JSON floor", conc, httpFloor, httpFloor)
		printRow("REST GET /v1/tasks/{id}", conc, rest, httpFloor)
	}
}
