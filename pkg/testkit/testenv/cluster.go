package testenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// StartRedisCluster starts a Redis Cluster of the test's own: masters
// redis-server processes with cluster mode on (no replicas, no
// persistence), each on free client and bus ports in a temporary folder.
// The hash slots are split evenly in contiguous ranges, the nodes are
// joined with CLUSTER MEET, and it returns the nodes' addresses once every
// node reports cluster_state:ok with every slot covered. The processes are
// killed when the test ends.
func StartRedisCluster(t testing.TB, masters int) (addrs []string) {
	t.Helper()
	if masters < 1 || masters > clusterSlots {
		t.Fatalf("StartRedisCluster: %d masters", masters)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servers := make([]*RedisServer, masters)
	buses := make([]int, masters)
	clients := make([]*redis.Client, masters)
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range servers {
		// The bus port is given explicitly: port+10000 may be taken or
		// past 65535.
		buses[i] = FreePort(t)
		servers[i] = StartRedis(t, false,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(buses[i]),
			"--cluster-node-timeout", "5000",
		)
		clients[i] = redis.NewClient(&redis.Options{Addr: servers[i].Addr})
		addrs = append(addrs, servers[i].Addr)
	}
	for i, c := range clients {
		lo := i * clusterSlots / masters
		hi := (i+1)*clusterSlots/masters - 1
		if err := c.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, servers[i].Addr, err)
		}
		// Distinct epochs up front, as redis-cli --cluster create does, so
		// the nodes need not resolve epoch collisions.
		if err := c.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("CLUSTER SET-CONFIG-EPOCH on %s: %v", servers[i].Addr, err)
		}
	}
	for i := 1; i < masters; i++ {
		// MEET ip port bus-port (Redis 7): the bus port is not port+10000.
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", servers[i].Port, buses[i]).Err(); err != nil {
			t.Fatalf("CLUSTER MEET %s: %v", servers[i].Addr, err)
		}
	}
	for i, c := range clients {
		if err := waitClusterOK(ctx, c, masters); err != nil {
			t.Fatalf("redis cluster node %s: %v", servers[i].Addr, err)
		}
	}
	return addrs
}

// waitClusterOK polls CLUSTER INFO until the node sees the whole cluster
// healthy: state ok, every slot served, every node known.
func waitClusterOK(ctx context.Context, c *redis.Client, nodes int) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
		"cluster_known_nodes":    strconv.Itoa(nodes),
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
	}
	var last string
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil {
			last = info
			if infoHas(info, want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ok: %w (last CLUSTER INFO: %q, error %v)", ctx.Err(), last, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// infoHas reports whether INFO or CLUSTER INFO output ("field:value"
// lines) has every field of want.
func infoHas(info string, want map[string]string) bool {
	got := map[string]string{}
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			got[k] = v
		}
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
