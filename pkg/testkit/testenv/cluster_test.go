package testenv_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestStartRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	if len(addrs) != 3 {
		t.Fatalf("StartRedisCluster(3) = %v, want 3 addresses", addrs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[:1]})
	defer rdb.Close()

	var mu sync.Mutex
	masters := map[string]bool{}
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters[c.Options().Addr] = true
		return nil
	})
	if err != nil || len(masters) != 3 {
		t.Fatalf("ForEachMaster from one seed = %v, %v; want the 3 masters", masters, err)
	}
	// Keys in different slots cannot share a command; hash-tagged ones can.
	if err := rdb.MSet(ctx, "a", "1", "b", "2").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("MSET a b = %v, want CROSSSLOT", err)
	}
	if err := rdb.MSet(ctx, "{t}a", "1", "{t}b", "2").Err(); err != nil {
		t.Errorf("MSET {t}a {t}b = %v", err)
	}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if err := rdb.Set(ctx, k, k, time.Minute).Err(); err != nil {
			t.Errorf("SET %s through the cluster client = %v", k, err)
		}
	}
}

func TestStartRedisClusterWithReplicas(t *testing.T) {
	c := testenv.StartRedisClusterOn(t, 3, 1, 2*time.Second, nil)
	if len(c.Servers) != 6 {
		t.Fatalf("%d nodes, want 6", len(c.Servers))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owner, err := c.SlotOwner(ctx, 0, "{t}a")
	if err != nil || owner < 0 || owner > 2 {
		t.Fatalf("SlotOwner = %d, %v; want one of the 3 masters", owner, err)
	}
	replica := owner + 3
	c.Servers[owner].Kill(t)
	now, err := c.AwaitOwnerOtherThan(ctx, replica, owner, "{t}a")
	if err != nil || now != replica {
		t.Fatalf("after the master's kill the slot's owner is node %d (%v), want its replica %d", now, err, replica)
	}
	c.Servers[owner].Start(t)
	if err := c.AwaitReplicaOf(ctx, owner, replica); err != nil {
		t.Fatal(err)
	}
}
