package testenv

import (
	"context"
	"fmt"
	"net"
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

// RedisCluster is a Redis Cluster of a test's own with replicas:
// StartRedisClusterOn's.
type RedisCluster struct {
	// Servers are the nodes: the masters first, then the replicas, the
	// replica k following master k % masters at the start.
	Servers []*RedisServer
	// Buses are the nodes' cluster bus ports, by node.
	Buses []int
	// IDs are the nodes' cluster node ids, by node.
	IDs []string
}

// StartRedisClusterOn starts a Redis Cluster of masters masters, each
// with replicas replicas, every node with AOF (appendfsync always) and a
// cluster node timeout of nodeTimeout; node i runs on host(i) (listening
// on its address, announced to the cluster by it, started through its
// Wrap; a nil host: every node on 127.0.0.1). extra is passed to every
// node. It returns once every node sees the whole cluster ok and every
// replica is linked to its master; the processes are killed when the
// test ends.
func StartRedisClusterOn(t testing.TB, masters, replicas int, nodeTimeout time.Duration, host func(i int) Host, extra ...string) *RedisCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := masters * (1 + replicas)
	c := &RedisCluster{}
	var clients []*redis.Client
	for i := range n {
		bus := FreePort(t)
		h := Loopback("127.0.0.1")
		if host != nil {
			h = host(i)
		}
		s := newRedisServer(t, h.Addr, true, append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-announce-ip", h.Addr,
		}, extra...)...)
		s.wrap = h.Wrap
		s.Start(t)
		t.Cleanup(func() { s.Kill(t) })
		c.Servers, c.Buses = append(c.Servers, s), append(c.Buses, bus)
		rdb := c.Client(i)
		defer rdb.Close()
		clients = append(clients, rdb)
		id, err := rdb.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("CLUSTER MYID on %s: %v", s.Addr, err)
		}
		c.IDs = append(c.IDs, id)
	}
	for i := range masters {
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		rdb := clients[i]
		if err := rdb.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, c.Servers[i].Addr, err)
		}
		if err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("CLUSTER SET-CONFIG-EPOCH on %s: %v", c.Servers[i].Addr, err)
		}
	}
	for i := 1; i < n; i++ {
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", c.Servers[i].Host, c.Servers[i].Port, c.Buses[i]).Err(); err != nil {
			t.Fatalf("CLUSTER MEET %s: %v", c.Servers[i].Addr, err)
		}
	}
	for i := masters; i < n; i++ {
		master := c.IDs[i%masters]
		// A replica can follow a master only once it knows the master
		// (the MEET spreads by gossip).
		err := waitFor(ctx, func() (bool, string, error) {
			err := clients[i].Do(ctx, "CLUSTER", "REPLICATE", master).Err()
			return err == nil, "", err
		})
		if err != nil {
			t.Fatalf("CLUSTER REPLICATE on %s: %v", c.Servers[i].Addr, err)
		}
	}
	for i := range c.Servers {
		if err := waitClusterOK(ctx, clients[i], n); err != nil {
			t.Fatalf("redis cluster node %s: %v", c.Servers[i].Addr, err)
		}
	}
	for i := masters; i < n; i++ {
		if err := c.awaitLinked(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// Client is a client of node i alone (no retries); the caller closes it.
func (c *RedisCluster) Client(i int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: c.Servers[i].Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

// Addrs lists the nodes' addresses (the seeds of a cluster client).
func (c *RedisCluster) Addrs() []string {
	var out []string
	for _, s := range c.Servers {
		out = append(out, s.Addr)
	}
	return out
}

// Endpoints lists node i's client and cluster bus ports (host:port): what
// its replicas and the other nodes connect to.
func (c *RedisCluster) Endpoints(i int) []string {
	return []string{c.Servers[i].Addr, net.JoinHostPort(c.Servers[i].Host, strconv.Itoa(c.Buses[i]))}
}

// Node is the index of the node with the cluster node id id, or -1.
func (c *RedisCluster) Node(id string) int {
	for i, x := range c.IDs {
		if x == id {
			return i
		}
	}
	return -1
}

// SlotOwner is the node that node asker (which must answer) names as the
// master of key's hash slot.
func (c *RedisCluster) SlotOwner(ctx context.Context, asker int, key string) (int, error) {
	rdb := c.Client(asker)
	defer rdb.Close()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return -1, fmt.Errorf("CLUSTER KEYSLOT on %s: %w", c.Servers[asker].Addr, err)
	}
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		return -1, fmt.Errorf("CLUSTER SHARDS on %s: %w", c.Servers[asker].Addr, err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return c.Node(n.ID), nil
				}
			}
		}
	}
	return -1, fmt.Errorf("slot %d of %q has no master in CLUSTER SHARDS of %s", slot, key, c.Servers[asker].Addr)
}

// AwaitOwnerOtherThan waits until node asker names a master other than
// old for key's slot and returns it.
func (c *RedisCluster) AwaitOwnerOtherThan(ctx context.Context, asker, old int, key string) (int, error) {
	owner := -1
	err := waitFor(ctx, func() (bool, string, error) {
		var err error
		owner, err = c.SlotOwner(ctx, asker, key)
		return err == nil && owner >= 0 && owner != old, fmt.Sprintf("owner node %d", owner), err
	})
	return owner, err
}

// AwaitReplicaOf waits until node i is a replica of node master, linked
// to it and in sync, and every node sees the cluster ok.
func (c *RedisCluster) AwaitReplicaOf(ctx context.Context, i, master int) error {
	err := waitFor(ctx, func() (bool, string, error) {
		rdb := c.Client(i)
		defer rdb.Close()
		role, err := rdb.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) < 4 {
			return false, fmt.Sprint(role), err
		}
		return role[0] == "slave" && fmt.Sprint(role[2]) == strconv.Itoa(c.Servers[master].Port) && role[3] == "connected", fmt.Sprint(role), nil
	})
	if err != nil {
		return fmt.Errorf("node %s a replica of %s: %w", c.Servers[i].Addr, c.Servers[master].Addr, err)
	}
	for k := range c.Servers {
		rdb := c.Client(k)
		err := waitClusterOK(ctx, rdb, len(c.Servers))
		rdb.Close()
		if err != nil {
			return fmt.Errorf("redis cluster node %s: %w", c.Servers[k].Addr, err)
		}
	}
	return nil
}

// awaitLinked waits until replica i's link to its master is up.
func (c *RedisCluster) awaitLinked(ctx context.Context, i int) error {
	rdb := c.Client(i)
	defer rdb.Close()
	var last string
	err := waitFor(ctx, func() (bool, string, error) {
		info, err := rdb.Info(ctx, "replication").Result()
		last = info
		return err == nil && infoHas(info, map[string]string{"role": "slave", "master_link_status": "up"}), "", err
	})
	if err != nil {
		return fmt.Errorf("replica %s not linked: %w (INFO replication %q)", c.Servers[i].Addr, err, last)
	}
	return nil
}
