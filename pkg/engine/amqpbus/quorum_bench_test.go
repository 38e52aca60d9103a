package amqpbus_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// Load of BenchmarkQuorumQueue: what the gateways and split-workers of
// production do, in this process.
const (
	qqGateways   = 3  // publishers, each a Conn with the default 4 confirm channels
	qqPublishers = 48 // goroutines publishing at full speed, spread over the gateways
	qqWorkers    = 3  // consumers, each a Conn consuming every split queue
	qqPrefetch   = 32 // ORDERFLOW_SPLITWORKER_PREFETCH's default (the worker's concurrency is max(prefetch, concurrency))
	qqWarmUp     = time.Second
	qqWindow     = 5 * time.Second
)

// BenchmarkQuorumQueue measures what one split queue (a quorum queue,
// declared by jobqueue.Topology, replicated over the 3 nodes of a RabbitMQ
// cluster of its own) carries: qqPublishers goroutines publish 20-item
// split jobs with the production Publisher (confirms, mandatory, 4
// channels per connection) while qqWorkers consumers (amqpbus.Consume,
// the production prefetch, manual acks) decode and ack them. After a
// warm-up it counts, over qqWindow, publishes confirmed, deliveries acked,
// the publishes' confirm latency, the CPU seconds of each node's
// processes (/proc/<pid>/stat of its process group) and the share of each
// node's Erlang reductions done by the queues' Raft processes (the
// leader's is the process that bounds one queue), then does the same
// with 4 split queues whose leaders are spread over the nodes (declared
// through a connection to the node that is to lead: RabbitMQ's
// client-local leader placement).
//
// The nodes and the load generator share the machine's cores, so a rate
// is a wall rate on them, and CPU per 1,000 messages is the figure that
// carries over to other machines. It runs once whatever b.N is (40–60 s
// on the shared 2-core box, most of it starting the nodes); make
// bench-quorum runs it alone.
func BenchmarkQuorumQueue(b *testing.B) {
	cluster := testenv.StartRabbitCluster(b, 3)
	fmt.Printf("\nsplit queue on a 3-node RabbitMQ cluster (own nodes), %d publishing goroutines over %d gateway connections, %d consumers (prefetch %d), %s after %s warm-up, load average %s\n",
		qqPublishers, qqGateways, qqWorkers, qqPrefetch, qqWindow, qqWarmUp, loadAvg())
	for _, queues := range []int{1, 4} {
		r := runQuorum(b, cluster, queues)
		fmt.Printf("  %d quorum queue(s), leaders on nodes %v: %.0f publishes confirmed/s, %.0f deliveries acked/s, confirm p50 %s p99 %s\n",
			queues, r.leaders, r.confirmed/r.wall.Seconds(), r.acked/r.wall.Seconds(),
			r.lat[len(r.lat)/2].Round(100*time.Microsecond), r.lat[len(r.lat)*99/100].Round(100*time.Microsecond))
		var total float64
		for i, c := range r.cpu {
			total += c
			fmt.Printf("    node %d: %.2f CPU s = %.3f core-s per 1,000 messages (leads %d); the split queues' Raft processes on it did %.0f %% of its reductions\n",
				i, c, 1000*c/r.confirmed, r.leads[i], 100*r.raft[i])
		}
		fmt.Printf("    all nodes: %.2f CPU s = %.3f core-s per 1,000 messages; load generator %.2f CPU s; load average %s\n",
			total, 1000*total/r.confirmed, r.self, loadAvg())
		b.ReportMetric(r.confirmed/r.wall.Seconds(), fmt.Sprintf("confirmed/s-%dq", queues))
	}
}

// quorumRun is one run's figures over the window.
type quorumRun struct {
	confirmed, acked float64
	wall             time.Duration
	lat              []time.Duration // sorted confirm latencies
	cpu              []float64       // CPU seconds of each node
	self             float64         // CPU seconds of this process
	leaders          []int           // leading node of each queue
	leads            []int           // queues led by each node
	raft             []float64       // share of each node's reductions done by the split queues' Raft processes on it
}

// runQuorum declares queues split queues (queue i through node i % 3) and
// runs the load on them.
func runQuorum(b *testing.B, cluster *testenv.RabbitCluster, queues int) quorumRun {
	b.Helper()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := make([]jobqueue.Names, queues)
	r := quorumRun{leads: make([]int, len(cluster.Nodes))}
	for i := range names {
		names[i] = jobqueue.NewNames(testenv.Prefix(b))
		declare := amqpbus.New(amqpbus.Config{URL: config.Secret(cluster.Nodes[i%len(cluster.Nodes)].URL()), DialTimeout: 10 * time.Second}, log, names[i].Topology(5))
		if err := declare.Check(); err != nil {
			b.Fatalf("declare split queue %d: %v", i, err)
		}
		_ = declare.Close()
		members, err := cluster.QuorumMembers(ctx, names[i].Queue)
		if err != nil || len(members) != len(cluster.Nodes) {
			b.Fatalf("members of %s = %v (%v), want all %d nodes", names[i].Queue, members, err, len(cluster.Nodes))
		}
		leader, err := cluster.QuorumLeader(ctx, names[i].Queue)
		if err != nil {
			b.Fatal(err)
		}
		k := slices.Index(cluster.Nodes, leader)
		r.leaders = append(r.leaders, k)
		r.leads[k]++
	}
	defer func() {
		// Delete the queues so that their backlog costs the next run nothing.
		c, err := amqp.Dial(cluster.Nodes[0].URL())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range names {
			for _, q := range n.Queues() {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
		}
	}()
	cfg := amqpbus.Config{URL: config.Secret(cluster.URLs()), DialTimeout: 10 * time.Second, PublishTimeout: 5 * time.Second,
		Heartbeat: 5 * time.Second, PublishChannels: 4, PublishInFlight: 256}
	open := func() *amqpbus.Conn {
		c := amqpbus.New(cfg, log, func(*amqp.Channel) error { return nil })
		if err := c.Check(); err != nil {
			b.Fatal(err)
		}
		return c
	}

	var measuring atomic.Bool
	var acked atomic.Int64
	run, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range qqWorkers {
		c := open()
		defer c.Close()
		for _, n := range names {
			wg.Go(func() {
				_ = c.Consume(run, amqpbus.ConsumeOptions{Queue: n.Queue, Prefetch: qqPrefetch, Concurrency: qqPrefetch},
					func(ctx context.Context, d amqp.Delivery) amqpbus.Outcome {
						if _, _, err := jobqueue.Decode(ctx, d); err != nil {
							return amqpbus.Reject
						}
						if measuring.Load() {
							acked.Add(1)
						}
						return amqpbus.Ack
					})
			})
		}
	}
	pubs := make([]*amqpbus.Publisher, qqGateways)
	for i := range pubs {
		c := open()
		defer c.Close()
		pubs[i] = amqpbus.NewPublisher(c)
		defer pubs[i].Close()
	}
	lats := make([][]time.Duration, qqPublishers)
	var failed atomic.Int64
	for g := range qqPublishers {
		wg.Go(func() {
			items := make([]*taskv1.OrderItem, 20)
			for i := range items {
				items[i] = &taskv1.OrderItem{ItemCode: fmt.Sprintf("I%02d", i), Sku: fmt.Sprintf("SKU-%d", i%5), Quantity: 1}
			}
			pub, n := pubs[g%len(pubs)], names[g%len(names)]
			for k := 0; run.Err() == nil; k++ {
				id := fmt.Sprintf("bench-%d-%d", g, k)
				msg, err := jobqueue.Encode(context.Background(), &jobv1.SplitJob{TaskId: id, MemberId: "m-bench",
					OrderCode: "O-" + id, Items: items, SubmitTime: timestamppb.Now()})
				if err != nil {
					b.Error(err)
					return
				}
				t0 := time.Now()
				err = pub.Publish(context.Background(), n.Exchange, jobqueue.RoutingKey, msg)
				if err != nil {
					failed.Add(1)
					continue
				}
				if measuring.Load() {
					lats[g] = append(lats[g], time.Since(t0))
				}
			}
		})
	}

	time.Sleep(qqWarmUp)
	reds0 := raftShare(b, cluster, names)
	cpu0, self0 := nodesCPU(b, cluster), selfCPU(b)
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(qqWindow)
	measuring.Store(false)
	r.wall = time.Since(t0)
	cpu1, self1 := nodesCPU(b, cluster), selfCPU(b)
	reds1 := raftShare(b, cluster, names)
	for i := range reds1 {
		r.raft = append(r.raft, (reds1[i][1]-reds0[i][1])/(reds1[i][0]-reds0[i][0]))
	}
	stop()
	wg.Wait()
	if f := failed.Load(); f > 0 {
		fmt.Printf("    (%d publishes not confirmed)\n", f)
	}
	for i := range cpu1 {
		r.cpu = append(r.cpu, cpu1[i]-cpu0[i])
	}
	r.self = self1 - self0
	for _, l := range lats {
		r.lat = append(r.lat, l...)
	}
	slices.Sort(r.lat)
	r.confirmed, r.acked = float64(len(r.lat)), float64(acked.Load())
	if len(r.lat) == 0 {
		b.Fatal("no publish confirmed in the window")
	}
	return r
}

// raftShare reads, on every node at once, the node's reductions so far
// (erlang:statistics(reductions)) and those of the Raft processes of the
// split queues of names that run on it (registered as '%2F_<queue>', the
// leader or a follower): a reduction is the Erlang VM's unit of work, so
// the share of the second in the growth of the first says how much of the
// node's CPU the queues' own processes took.
func raftShare(b *testing.B, cluster *testenv.RabbitCluster, names []jobqueue.Names) [][2]float64 {
	b.Helper()
	var regs []string
	for _, n := range names {
		regs = append(regs, fmt.Sprintf("'%%2F_%s'", n.Queue))
	}
	expr := fmt.Sprintf("{T, _} = erlang:statistics(reductions), Q = lists:sum([R || N <- [%s], P <- [whereis(N)], is_pid(P), {reductions, R} <- [erlang:process_info(P, reductions)]]), io:format(\"~b ~b~n\", [T, Q]).",
		strings.Join(regs, ","))
	out := make([][2]float64, len(cluster.Nodes))
	errs := make([]error, len(cluster.Nodes))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range cluster.Nodes {
		wg.Go(func() {
			s, err := n.Eval(ctx, expr)
			if err == nil {
				_, err = fmt.Sscanf(strings.TrimSpace(s), "%f %f", &out[i][0], &out[i][1])
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("reductions of node %d: %v", i, err)
		}
	}
	return out
}

// nodesCPU is the CPU seconds each node has used so far.
func nodesCPU(b *testing.B, cluster *testenv.RabbitCluster) []float64 {
	b.Helper()
	var cpu []float64
	for _, n := range cluster.Nodes {
		c, err := n.CPU()
		if err != nil {
			b.Fatalf("CPU of node %s: %v", n.Name, err)
		}
		cpu = append(cpu, c)
	}
	return cpu
}

// selfCPU is the CPU seconds this process has used so far.
func selfCPU(b *testing.B) float64 {
	b.Helper()
	c, err := testenv.ProcessCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
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
