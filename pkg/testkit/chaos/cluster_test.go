package chaos_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/testkit/chaos"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// clusterReplicas is the replicated stack of the RabbitMQ cluster rows:
// 2 gateways, 3 split-workers, 2 reconcilers (and one of each simulator).
var clusterReplicas = map[string]int{stacktest.Gateway: 2, stacktest.SplitWorker: 3, stacktest.Reconciler: 2}

// hosts is a replicated stack whose every process (each RabbitMQ node,
// each Redis Cluster node, each service instance) is a host of its own, in
// a network namespace, that a partition can cut from the others. Hosts are
// named by instance ("gateway-2") and by node ("rabbit-1", "redis-4").
type hosts struct {
	prefix string
	rabbit *testenv.RabbitCluster // nil: the suite's single node
	net    *netHosts
	redis  string // the suite's Redis (host:port), as the services reach it
}

// instances lists the stack's service instances ("gateway", "gateway-2", …).
func instances() []string {
	var out []string
	for _, n := range stacktest.Services() {
		for i := range max(1, clusterReplicas[n]) {
			if i == 0 {
				out = append(out, n)
			} else {
				out = append(out, fmt.Sprintf("%s-%d", n, i+1))
			}
		}
	}
	return out
}

// onHosts is a scenario on the replicated stack, every process in a
// network namespace of its own: with rabbitNodes 3 the services run on a
// RabbitMQ cluster of the scenario's own (a URL list, quorum queues over
// the 3 nodes), with 0 on the suite's node (through a proxy on the
// bridge). Redis is the suite's, on the bridge's address. fault gets the
// hosts once the stack runs.
func onHosts(name string, rabbitNodes int, fault func(r *run, h *hosts)) scenario {
	sc, _ := onHostsOf(name, rabbitNodes, fault)
	return sc
}

// onHostsOf is onHosts, also returning the hosts (set up by the
// scenario's setup).
func onHostsOf(name string, rabbitNodes int, fault func(r *run, h *hosts)) (scenario, *hosts) {
	h := &hosts{}
	return scenario{
		name: name, partition: true,
		setup: func(su *suite, o *stacktest.Options) {
			t := su.current
			h.prefix = strings.TrimPrefix(testenv.Prefix(t), "oft-")
			h.rabbit = nil
			o.Replicas = clusterReplicas
			h.net = newNetHosts(t)
			h.net.runStack(su, o)
			h.redis = h.net.reachRedis(su)
			o.RedisAddr = h.redis
			if rabbitNodes > 0 {
				h.rabbit = testenv.StartRabbitClusterOn(t, rabbitNodes, func(i int) testenv.Host {
					return h.net.on(fmt.Sprintf("rabbit-%d", i+1))
				})
				o.AMQPURL = h.rabbit.URLs()
				t.Cleanup(func() {
					if t.Failed() {
						for _, n := range h.rabbit.Nodes {
							t.Logf("rabbitmq node %s:\n%s", n.Name, n.LogTail(30))
						}
					}
				})
			}
		},
		fault: func(r *run) { fault(r, h) },
	}, h
}

// cut partitions hosts from endpoints for hold, then heals.
func (h *hosts) cut(r *run, tag string, hold time.Duration, sides ...side) {
	heal := h.split(r, tag, sides...)
	time.Sleep(hold)
	heal()
}

// split partitions hosts from endpoints and returns the function that
// heals it; it is healed at the end of the scenario whatever happens.
// Every host of a side gets rules of its own, in its namespace
// (chaos.Host.Cut).
func (h *hosts) split(r *run, tag string, sides ...side) (heal func()) {
	var heals []func()
	for i, s := range sides {
		for _, name := range s.from {
			heals = append(heals, h.net.cut(r, fmt.Sprintf("%s-%d", tag, i), h.net.host(name), s.to))
		}
	}
	return func() {
		for _, heal := range heals {
			heal()
		}
	}
}

// side is one direction of a partition: the connections the hosts from
// (by name) open to the endpoints to (host:port).
type side struct {
	from []string
	to   []string
}

// leader is the index of the cluster node that leads the split-job
// quorum queue.
func (h *hosts) leader(r *run) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := h.rabbit.QuorumLeader(ctx, jobqueue.NewNames(r.s.Prefix()).Queue)
	return slices.Index(h.rabbit.Nodes, n), err
}

// mustLeader is leader, failing the scenario on an error.
func (h *hosts) mustLeader(r *run) int {
	l, err := h.leader(r)
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// noteLeader records which node leads the split-job queue now.
func (h *hosts) noteLeader(r *run, format string, args ...any) {
	l, err := h.leader(r)
	if err != nil {
		r.note(format+"; leader unknown (%v)", append(args, err)...)
		return
	}
	r.note(format+"; node %d leads the split queue", append(args, l+1)...)
}

// awaitCluster waits until every node runs and sees the whole cluster.
func (h *hosts) awaitCluster(r *run) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := h.rabbit.AwaitRunning(ctx, len(h.rabbit.Nodes)); err != nil {
		r.t.Fatal(err)
	}
}

// endpoints lists the AMQP and distribution endpoints of the nodes i.
func (h *hosts) endpoints(i ...int) []string {
	var out []string
	for _, k := range i {
		out = append(out, h.rabbit.Nodes[k].Endpoints()...)
	}
	return out
}

// others lists the node indices other than i.
func (h *hosts) others(i int) []int {
	var out []int
	for k := range h.rabbit.Nodes {
		if k != i {
			out = append(out, k)
		}
	}
	return out
}

// nodes names the hosts of the cluster nodes i.
func (h *hosts) nodes(i ...int) []string {
	var out []string
	for _, k := range i {
		out = append(out, fmt.Sprintf("rabbit-%d", k+1))
	}
	return out
}

// partitionHold is how long the network partitions of the replicated
// stack last.
func partitionHold() time.Duration { return span(30*time.Second, 10*time.Second) }

// clusterScenarios are the faults of the replicated stack: the RabbitMQ
// cluster's quorum-queue leader killed or partitioned, a minority node
// partitioned with its clients, one process cut from one engine only,
// and a slow, lossy network to Redis.
func clusterScenarios() []scenario {
	return []scenario{
		onHosts("rabbitmq quorum leader kill -9", 3, func(r *run, h *hosts) {
			l := h.mustLeader(r)
			n := h.rabbit.Nodes[l]
			n.Kill()
			time.Sleep(5 * time.Second)
			h.noteLeader(r, "leader node %d killed", l+1)
			if err := n.Start(3 * time.Minute); err != nil {
				r.t.Fatal(err)
			}
			h.awaitCluster(r)
		}),
		onHosts("rabbitmq quorum leader partitioned from the majority", 3, func(r *run, h *hosts) {
			l := h.mustLeader(r)
			rest := h.others(l)
			heal := h.split(r, "leader",
				side{h.nodes(l), h.endpoints(rest...)},
				side{h.nodes(rest...), h.endpoints(l)})
			time.Sleep(partitionHold())
			h.noteLeader(r, "leader node %d cut from nodes %d and %d", l+1, rest[0]+1, rest[1]+1)
			heal()
			h.awaitCluster(r)
		}),
		// The minority side: node 3 and the gateway that takes the load,
		// the third split-worker and the second reconciler, which lose
		// the majority's nodes; the other services lose node 3. Redis and
		// the services' HTTP and gRPC calls to each other stay reachable.
		everyRequestAnswered(onHosts("rabbitmq minority node partitioned with its clients", 3, func(r *run, h *hosts) {
			minority := []string{stacktest.Gateway, "splitworker-3", "reconciler-2"}
			var majority []string
			for _, inst := range instances() {
				if !slices.Contains(minority, inst) {
					majority = append(majority, inst)
				}
			}
			r.note("node 3 with %v cut from nodes 1, 2 and %v", minority, majority)
			h.cut(r, "minority", partitionHold(),
				side{append(h.nodes(2), minority...), h.endpoints(0, 1)},
				side{append(h.nodes(0, 1), majority...), h.endpoints(2)})
			h.awaitCluster(r)
		})),
		onHosts("one of 3 splitworkers cut from redis only", 3, func(r *run, h *hosts) {
			h.cut(r, "sw-redis", partitionHold(), side{[]string{"splitworker-2"}, []string{h.redis}})
		}),
		everyRequestAnswered(onHosts("one of 2 gateways cut from rabbitmq only", 3, func(r *run, h *hosts) {
			h.cut(r, "gw-amqp", partitionHold(), side{[]string{stacktest.Gateway}, h.endpoints(0, 1, 2)})
		})),
		slowLossyRedis(),
		skewedHosts(),
	}
}

// everyRequestAnswered adds to sc the check that every request got an
// answer within the client's timeout: a gateway whose RabbitMQ drops
// packets answers a submission within its confirm wait (the task, kept for
// the outbox, when the outcome is unknown; 503 when the job certainly was
// not queued), never leaves the client to time out.
func everyRequestAnswered(sc scenario) scenario {
	check := sc.check
	sc.check = func(r *run, res *result) {
		if check != nil {
			check(r, res)
		}
		if res.noAnswer != 0 {
			r.t.Errorf("requests without an answer within %s = %d, want 0", clientTimeout, res.noAnswer)
		}
	}
	return sc
}

// skewedHosts runs the replicated stack with hosts of each service kind
// off the right time: the gateway that takes the load 20 s ahead and the
// other 20 s behind, a split-worker 20 s behind, a reconciler 20 s ahead
// (the
// test-only *_CLOCK_SKEW settings, refused in production). Leases, the
// outbox, the repair sweeper and the reconciliation schedule must not
// act early or twice on a skewed replica's word.
func skewedHosts() scenario {
	return scenario{
		name: "one host of each service kind with its clock 20s off", partition: true, short: true,
		setup: func(_ *suite, o *stacktest.Options) {
			o.Replicas = clusterReplicas
			// Keyed by service, for every gateway; the second's own
			// setting overrides it.
			o.ServiceEnv[stacktest.Gateway]["ORDERFLOW_GATEWAY_CLOCK_SKEW"] = "20s"
			o.ServiceEnv["gateway-2"] = map[string]string{"ORDERFLOW_GATEWAY_CLOCK_SKEW": "-20s"}
			o.ServiceEnv["splitworker-2"] = map[string]string{"ORDERFLOW_SPLITWORKER_CLOCK_SKEW": "-20s"}
			o.ServiceEnv["reconciler-2"] = map[string]string{"ORDERFLOW_RECONCILER_CLOCK_SKEW": "20s"}
		},
		fault: func(*run) { time.Sleep(span(20*time.Second, 10*time.Second)) },
	}
}

// slowLossyRedis delays by 200 ms every round trip between the stack's
// processes and the suite's Redis and drops 5 % of their packets, both
// ways, for 30 s (chaos.PacketDelay: this machine's kernel has no netem
// queueing discipline, so iptables' statistic match drops the packets
// and an NFQUEUE queue the suite reads holds the others; see
// docs/reliability.md).
// The rules match only connections to the suite's own Redis port.
func slowLossyRedis() scenario {
	const delay, loss = 200 * time.Millisecond, 0.05
	return scenario{
		name: "redis 200ms latency, 5% packet loss", partition: true,
		setup: func(_ *suite, o *stacktest.Options) { o.Replicas = clusterReplicas },
		fault: func(r *run) {
			host, port, err := net.SplitHostPort(r.su.redis.Addr)
			if err != nil {
				r.t.Fatal(err)
			}
			pd, err := chaos.NewPacketDelay(chaos.PacketDelayConfig{
				Tag:   strings.TrimPrefix(r.s.Prefix(), "oft-") + "-redis",
				Match: []string{"-p", "tcp", "-d", host, "--dport", port},
				Delay: delay, Loss: loss,
			})
			if pd != nil {
				r.t.Cleanup(func() { _ = pd.Close() })
			}
			if err != nil {
				r.t.Fatal(err)
			}
			time.Sleep(partitionHold())
			if err := pd.Close(); err != nil {
				r.t.Fatal(err)
			}
			dropped, err := pd.Dropped()
			if err != nil {
				r.t.Fatal(err)
			}
			r.note("packets to and from redis held %s each way: %d, dropped: %d", delay/2, pd.Held(), dropped)
			if pd.Held() == 0 || dropped == 0 {
				r.t.Errorf("packets held = %d, dropped = %d, want both above 0: the fault did not reach the stack's Redis traffic", pd.Held(), dropped)
			}
		},
		check: func(r *run, _ *result) {
			r.note("submissions answered (median / 90th percentile): %s before the fault, %s during it",
				answerTimes(r, time.Time{}, r.faultStart), answerTimes(r, r.faultStart, r.faultEnd))
		},
	}
}

// answerTimes is the median and 90th percentile of the answer times of the
// submissions sent in [from, to).
func answerTimes(r *run, from, to time.Time) string {
	r.l.mu.Lock()
	var ds []time.Duration
	for _, s := range r.l.subs {
		if !s.sent.Before(from) && s.sent.Before(to) && !s.done.IsZero() {
			ds = append(ds, s.done.Sub(s.sent))
		}
	}
	r.l.mu.Unlock()
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	return fmt.Sprintf("%s / %s (%d)", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*9/10].Round(time.Millisecond), len(ds))
}
