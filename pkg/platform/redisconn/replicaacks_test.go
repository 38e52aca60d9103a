package redisconn_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// script writes one key, as the product's Lua scripts do.
var script = redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]) return 1`)

// TestWritesWaitForReplicaAcks: with ORDERFLOW_REDIS_MIN_REPLICA_ACKS=1 a
// write (a command, a script, a pipeline) returns only once the replica has
// it; with the replica stopped, writes fail with ErrNotReplicated while
// reads still answer.
func TestWritesWaitForReplicaAcks(t *testing.T) {
	primary := testenv.StartRedis(t, false)
	replica := testenv.StartRedis(t, false, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	ctx := context.Background()
	pc := redis.NewClient(&redis.Options{Addr: primary.Addr})
	defer pc.Close()
	waitUntil(t, "the replica in sync", func() bool {
		info, err := pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})

	cfg, err := config.LoadEnv[redisconn.Config](map[string]string{
		"ORDERFLOW_REDIS_ADDR": primary.Addr, "ORDERFLOW_REDIS_MIN_REPLICA_ACKS": "1",
		"ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT": "300ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	c := redisconn.New(cfg)
	defer c.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()

	// Each write is on the replica the moment it returns.
	for i := range 50 {
		v := strconv.Itoa(i)
		if err := c.Set(ctx, "k:set", v, 0).Err(); err != nil {
			t.Fatalf("SET = %v", err)
		}
		if err := script.Run(ctx, c, []string{"k:script"}, v).Err(); err != nil {
			t.Fatalf("script = %v", err)
		}
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "k:pipe", v, 0)
			p.Get(ctx, "k:set")
			return nil
		}); err != nil {
			t.Fatalf("pipeline = %v", err)
		}
		for _, k := range []string{"k:set", "k:script", "k:pipe"} {
			if got, err := rc.Get(ctx, k).Result(); err != nil || got != v {
				t.Fatalf("replica GET %s = %q, %v right after the write returned; want %q", k, got, err, v)
			}
		}
	}

	// The replica stops answering: writes are not acknowledged, reads are
	// served.
	stop(t, replica, syscall.SIGSTOP)
	if err := c.Set(ctx, "k:set", "lost", 0).Err(); !errors.Is(err, redisconn.ErrNotReplicated) {
		t.Errorf("SET with the replica stopped = %v, want ErrNotReplicated", err)
	}
	if err := script.Run(ctx, c, []string{"k:script"}, "lost").Err(); !errors.Is(err, redisconn.ErrNotReplicated) {
		t.Errorf("script with the replica stopped = %v, want ErrNotReplicated", err)
	}
	start := time.Now()
	if got, err := c.Get(ctx, "k:pipe").Result(); err != nil || got != "49" {
		t.Errorf("GET with the replica stopped = %q, %v; want 49", got, err)
	}
	if d := time.Since(start); d >= 300*time.Millisecond {
		t.Errorf("GET with the replica stopped took %s, want it not to wait for replicas", d)
	}

	// The replica is back: writes are acknowledged again.
	stop(t, replica, syscall.SIGCONT)
	waitUntil(t, "writes acknowledged again", func() bool { return c.Set(ctx, "k:set", "back", 0).Err() == nil })
	if got, err := rc.Get(ctx, "k:set").Result(); err != nil || got != "back" {
		t.Errorf("replica GET k:set = %q, %v after the replica came back; want back", got, err)
	}
}

func TestConfigRefusesBadReplicaAcks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		names string
	}{
		{"negative", map[string]string{"ORDERFLOW_REDIS_MIN_REPLICA_ACKS": "-1"}, "ORDERFLOW_REDIS_MIN_REPLICA_ACKS"},
		{"timeout past read timeout", map[string]string{"ORDERFLOW_REDIS_MIN_REPLICA_ACKS": "1", "ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT": "2s"}, "ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.LoadEnv[redisconn.Config](tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.names) {
				t.Errorf("LoadEnv(%v) = %v, want an error naming %s", tc.env, err, tc.names)
			}
		})
	}
}

func stop(t *testing.T, s *testenv.RedisServer, sig syscall.Signal) {
	t.Helper()
	if err := s.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestRefusedWriteFailsWithinOneAckTimeout: a primary that refuses writes
// (NOREPLICAS: min-replicas-to-write not met, as while Sentinel fails
// over or a partition cuts the replicas off) fails a write — a command, a
// script, a pipeline — after one replica-acknowledgement wait, not one
// per retry of the Redis client; the writes that follow at once wait for
// no more than the server's timer resolution (100 ms at hz 10).
func TestRefusedWriteFailsWithinOneAckTimeout(t *testing.T) {
	primary := testenv.StartRedis(t, false, "--min-replicas-to-write", "1")
	const ackTimeout = 500 * time.Millisecond
	cfg, err := config.LoadEnv[redisconn.Config](map[string]string{
		"ORDERFLOW_REDIS_ADDR": primary.Addr, "ORDERFLOW_REDIS_MIN_REPLICA_ACKS": "1",
		"ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT": ackTimeout.String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := redisconn.New(cfg)
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"SET", func() error { return c.Set(ctx, "k:set", "v", 0).Err() }},
		{"script", func() error { return script.Run(ctx, c, []string{"k:script"}, "v").Err() }},
		{"pipeline", func() error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.ZAdd(ctx, "k:z", redis.Z{Score: 1, Member: "m"})
				p.Set(ctx, "k:pipe", "v", 0)
				return nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			time.Sleep(2 * ackTimeout) // past the window of the last refusal
			start := time.Now()
			err := tc.write()
			if d := time.Since(start); err == nil || d > 2*ackTimeout {
				t.Errorf("%s refused by the primary = %v after %s, want an error within %s", tc.name, err, d.Round(time.Millisecond), 2*ackTimeout)
			}
			start = time.Now()
			err = tc.write()
			if d := time.Since(start); err == nil || d > ackTimeout {
				t.Errorf("%s right after a refusal = %v after %s, want an error within %s", tc.name, err, d.Round(time.Millisecond), ackTimeout)
			}
		})
	}
}

// TestClusterWritesWaitForReplicaAcks: on a Redis Cluster with a replica
// per master, ORDERFLOW_REDIS_MIN_REPLICA_ACKS=1 makes every write wait
// for the replica of the master it went to: with the replica of one
// master stopped, writes to that master's slots fail with
// ErrNotReplicated while writes to the other masters and reads succeed.
func TestClusterWritesWaitForReplicaAcks(t *testing.T) {
	rc := testenv.StartRedisClusterOn(t, 3, 1, 5*time.Second, nil)
	ctx := context.Background()
	c := clusterClientWithAcks(t, rc, "300ms")
	owner, err := rc.SlotOwner(ctx, 0, "{a}")
	if err != nil {
		t.Fatal(err)
	}
	// A key on another master.
	other := ""
	for i := range 100 {
		k := "{b" + strconv.Itoa(i) + "}"
		if o, err := rc.SlotOwner(ctx, 0, k); err == nil && o != owner {
			other = k
			break
		}
	}
	if other == "" {
		t.Fatal("no key on another master")
	}
	replica := rc.Client(owner + 3)
	defer replica.Close()
	_ = replica.ReadOnly(ctx).Err()
	for i := range 20 {
		v := strconv.Itoa(i)
		if err := c.Set(ctx, "{a}set", v, 0).Err(); err != nil {
			t.Fatalf("SET = %v", err)
		}
		if err := script.Run(ctx, c, []string{"{a}script"}, v).Err(); err != nil {
			t.Fatalf("script = %v", err)
		}
		for _, k := range []string{"{a}set", "{a}script"} {
			if got, err := replica.Get(ctx, k).Result(); err != nil || got != v {
				t.Fatalf("replica GET %s = %q, %v right after the write returned; want %q", k, got, err, v)
			}
		}
	}

	stop(t, rc.Servers[owner+3], syscall.SIGSTOP)
	defer func() { _ = rc.Servers[owner+3].Signal(syscall.SIGCONT) }()
	if err := c.Set(ctx, "{a}set", "lost", 0).Err(); !errors.Is(err, redisconn.ErrNotReplicated) {
		t.Errorf("SET with the master's replica stopped = %v, want ErrNotReplicated", err)
	}
	if err := script.Run(ctx, c, []string{"{a}script"}, "lost").Err(); !errors.Is(err, redisconn.ErrNotReplicated) {
		t.Errorf("script with the master's replica stopped = %v, want ErrNotReplicated", err)
	}
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{a}pipe", "lost", 0)
		return nil
	}); !errors.Is(err, redisconn.ErrNotReplicated) {
		t.Errorf("pipeline with the master's replica stopped = %v, want ErrNotReplicated", err)
	}
	if err := c.Set(ctx, other+"set", "ok", 0).Err(); err != nil {
		t.Errorf("SET on another master = %v", err)
	}
	if got, err := c.Get(ctx, "{a}script").Result(); err != nil || got != "lost" {
		t.Errorf("GET with the replica stopped = %q, %v; want the write not acknowledged (the master applied it)", got, err)
	}
	stop(t, rc.Servers[owner+3], syscall.SIGCONT)
	waitUntil(t, "writes acknowledged again", func() bool { return c.Set(ctx, "{a}set", "back", 0).Err() == nil })
}

// TestClusterWriteFollowsMovedWithReplicaAcks: after a failover a write
// the client still sends to the demoted master is answered MOVED (and the
// WAIT after it refused on a replica); it must follow the redirect to the
// new master, not fail with ErrNotReplicated.
func TestClusterWriteFollowsMovedWithReplicaAcks(t *testing.T) {
	rc := testenv.StartRedisClusterOn(t, 3, 1, 5*time.Second, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Nothing is stopped here: the wait only has to outlast a loaded
	// machine (300 ms was not always enough with four test packages at once).
	c := clusterClientWithAcks(t, rc, "1500ms")
	if err := c.Set(ctx, "{a}k", "1", 0).Err(); err != nil {
		t.Fatalf("SET = %v", err)
	}
	owner, err := rc.SlotOwner(ctx, 0, "{a}")
	if err != nil {
		t.Fatal(err)
	}
	replica := rc.Client(owner + 3)
	defer replica.Close()
	if err := replica.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.AwaitOwnerOtherThan(ctx, owner+3, owner, "{a}"); err != nil {
		t.Fatal(err)
	}
	if err := rc.AwaitReplicaOf(ctx, owner, owner+3); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "{a}k", "2", 0).Err(); err != nil {
		t.Errorf("SET after the failover = %v, want it to follow MOVED to the new master", err)
	}
	if err := script.Run(ctx, c, []string{"{a}k"}, "3").Err(); err != nil {
		t.Errorf("script after the failover = %v, want it to follow MOVED to the new master", err)
	}
}

// clusterClientWithAcks is a client of rc that waits for one replica's
// acknowledgement of every write (ackTimeout at most); it is closed with t.
func clusterClientWithAcks(t *testing.T, rc *testenv.RedisCluster, ackTimeout string) redis.UniversalClient {
	t.Helper()
	cfg, err := config.LoadEnv[redisconn.Config](map[string]string{
		"ORDERFLOW_REDIS_ADDR": strings.Join(rc.Addrs(), ","), "ORDERFLOW_REDIS_MIN_REPLICA_ACKS": "1",
		"ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT": ackTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := redisconn.New(cfg)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
