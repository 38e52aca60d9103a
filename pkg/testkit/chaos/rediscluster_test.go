package chaos_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// clusterNodeTimeout is cluster-node-timeout of the Redis Cluster rows:
// how long a master goes unreachable before its replica may take its
// slots over, and how long a master cut off from the others goes on
// taking writes.
const clusterNodeTimeout = 3 * time.Second

// clusterMinReplicas is min-replicas-to-write (and min-replicas-max-lag
// 1) of the Redis Cluster rows' nodes: a master takes writes only while
// its replica acknowledges it.
var clusterMinReplicas = envOr("ORDERFLOW_CHAOS_CLUSTER_MIN_REPLICAS", "1")

// clusterMinReplicaAcks is the services' ORDERFLOW_REDIS_MIN_REPLICA_ACKS
// on the Redis Cluster rows: every write waits for the replica of the
// master it went to (0 shows what is lost without).
var clusterMinReplicaAcks = envOr("ORDERFLOW_CHAOS_CLUSTER_MIN_REPLICA_ACKS", "1")

// redisCluster is the Redis Cluster of a row: 3 masters, each with one
// replica, every node a host (network namespace) of its own, "redis-1"
// to "redis-6".
type redisCluster struct {
	*testenv.RedisCluster
}

// poolKey is a key in the hash slot of the stack's fulfilment pool (the
// slot pool's keys are tagged {<prefix>:fulfilment}).
func poolKey(r *run) string { return "{" + r.s.Prefix() + ":fulfilment}" }

// onRedisCluster is a scenario on the replicated stack (clusterReplicas,
// every process a host, the suite's RabbitMQ node) with Redis a cluster of
// the scenario's own: 3 masters with a replica each, AOF appendfsync
// always on every node, min-replicas-to-write 1; the services are given
// the six nodes as ORDERFLOW_REDIS_ADDR (cluster mode) and
// ORDERFLOW_REDIS_MIN_REPLICA_ACKS=1, as Redis durability requires. fault gets the cluster once the
// stack runs.
func onRedisCluster(name string, short bool, fault func(ctx context.Context, r *run, h *hosts, c *redisCluster)) scenario {
	c := &redisCluster{}
	sc, hh := onHostsOf(name, 0, func(r *run, hh *hosts) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		fault(ctx, r, hh, c)
	})
	hostsSetup := sc.setup
	sc.short = short
	sc.setup = func(su *suite, o *stacktest.Options) {
		hostsSetup(su, o)
		t := su.current
		c.RedisCluster = testenv.StartRedisClusterOn(t, 3, 1, clusterNodeTimeout, func(i int) testenv.Host { return hh.net.on(fmt.Sprintf("redis-%d", i+1)) },
			"--min-replicas-to-write", clusterMinReplicas, "--min-replicas-max-lag", "1")
		o.RedisAddr = strings.Join(c.Addrs(), ",")
		o.Env["ORDERFLOW_REDIS_MIN_REPLICA_ACKS"] = clusterMinReplicaAcks
		o.ServiceEnv[stacktest.Gateway]["ORDERFLOW_GATEWAY_REPAIR_GRACE"] = "20s"
		// The leak gauges count the stack's connections on every node.
		su.primary = func() string { return o.RedisAddr }
	}
	return sc
}

// redisClusterScenarios are the faults of the replicated stack on a Redis
// Cluster: the master of the pool's slot failed over by hand, killed, and
// cut off from its replica and the other masters while the services still
// reach it.
func redisClusterScenarios() []scenario {
	return []scenario{
		onRedisCluster("redis cluster manual failover of the pool's master", false, func(ctx context.Context, r *run, _ *hosts, c *redisCluster) {
			old := c.mustOwner(ctx, r, 0)
			replica := old + 3
			rdb := c.Client(replica)
			defer rdb.Close()
			if err := rdb.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
				r.t.Fatal(err)
			}
			if _, err := c.AwaitOwnerOtherThan(ctx, replica, old, poolKey(r)); err != nil {
				r.t.Fatal(err)
			}
			if err := c.AwaitReplicaOf(ctx, old, replica); err != nil {
				r.t.Fatal(err)
			}
			r.note("CLUSTER FAILOVER: node %d took the pool's slot from node %d", replica+1, old+1)
		}),
		onRedisCluster("redis cluster master kill -9 (replica promoted)", false, func(ctx context.Context, r *run, _ *hosts, c *redisCluster) {
			old := c.mustOwner(ctx, r, 0)
			replica := old + 3
			c.Servers[old].Kill(r.t)
			killed := time.Now()
			if _, err := c.AwaitOwnerOtherThan(ctx, replica, old, poolKey(r)); err != nil {
				r.t.Fatal(err)
			}
			promoted := time.Since(killed)
			c.Servers[old].Start(r.t)
			if err := c.AwaitReplicaOf(ctx, old, replica); err != nil {
				r.t.Fatal(err)
			}
			r.note("node %d (the pool's master) killed; node %d promoted after %s; node %d back as its replica after %s",
				old+1, replica+1, promoted.Round(100*time.Millisecond), old+1, time.Since(killed).Round(100*time.Millisecond))
		}),
		onRedisCluster("redis cluster master partitioned from its replica and the other masters", false, redisClusterSplitBrain),
	}
}

// redisClusterSplitBrain cuts the pool's master off from its replica and
// the other masters (the cluster bus and replication, both ways) while
// every service still reaches it: the replica is promoted by the other
// masters' votes after the node timeout, and until the old master notices
// it is in the minority it may take writes the new one never sees. The
// partition holds 10 s after the promotion, heals, and the old master
// becomes a replica of the new one.
func redisClusterSplitBrain(ctx context.Context, r *run, h *hosts, c *redisCluster) {
	old := c.mustOwner(ctx, r, 0)
	replica := old + 3
	var others []int
	var otherEnds []string
	for i := range c.Servers {
		if i != old {
			others = append(others, i)
			otherEnds = append(otherEnds, c.Endpoints(i)...)
		}
	}
	var otherHosts []string
	for _, i := range others {
		otherHosts = append(otherHosts, fmt.Sprintf("redis-%d", i+1))
	}
	cut := time.Now()
	heal := h.split(r, "rc-master",
		side{[]string{fmt.Sprintf("redis-%d", old+1)}, otherEnds},
		side{otherHosts, c.Endpoints(old)})
	if _, err := c.AwaitOwnerOtherThan(ctx, replica, old, poolKey(r)); err != nil {
		r.t.Fatal(err)
	}
	promoted := time.Since(cut)
	time.Sleep(span(10*time.Second, 3*time.Second))
	heal()
	if err := c.AwaitReplicaOf(ctx, old, replica); err != nil {
		r.t.Fatal(err)
	}
	r.note("node %d (the pool's master) cut from nodes %v; node %d promoted after %s; healed, node %d its replica",
		old+1, plusOne(others), replica+1, promoted.Round(100*time.Millisecond), old+1)
}

// mustOwner is the master of the pool's slot as node asker sees it.
func (c *redisCluster) mustOwner(ctx context.Context, r *run, asker int) int {
	owner, err := c.SlotOwner(ctx, asker, poolKey(r))
	if err != nil {
		r.t.Fatal(err)
	}
	if owner < 0 || owner > 2 {
		r.t.Fatalf("the pool's slot is on node %d, not one of the 3 first masters", owner+1)
	}
	return owner
}

func plusOne(is []int) []int {
	out := make([]int, len(is))
	for k, i := range is {
		out[k] = i + 1
	}
	return out
}
