package delayq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/delayq"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestQueueOnRedisCluster runs two replicas of a queue against a
// three-master Redis Cluster: every job fires once, never early, and a
// cancelled job does not fire.
func TestQueueOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := testenv.Prefix(t) + ":reconcile"

	var mu sync.Mutex
	fired := map[string]int{}
	var early []string
	handler := func(_ context.Context, j delayq.Job) error {
		mu.Lock()
		defer mu.Unlock()
		fired[j.ID]++
		if time.Now().Before(j.Due) {
			early = append(early, j.ID)
		}
		return nil
	}
	var queues []*delayq.Queue
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = rdb.Close() })
		q := delayq.New(rdb, delayq.Options{Name: name, Lease: 5 * time.Second, Concurrency: 8})
		queues = append(queues, q)
		wg.Add(1)
		go func() { defer wg.Done(); _ = q.Run(runCtx, handler) }()
	}
	const n = 300
	now := time.Now()
	for i := range n {
		due := now.Add(time.Duration(100+i*2) * time.Millisecond)
		if err := queues[i%2].Schedule(ctx, fmt.Sprintf("job-%d", i), due, []byte("p")); err != nil {
			t.Fatalf("Schedule(job-%d) = %v", i, err)
		}
	}
	// Due 2 s after it is scheduled, not after the 300 above were (which
	// can take longer than that on a loaded machine): the cancel always
	// comes first, and the wait below outlasts its due time.
	cancelDue := time.Now().Add(2 * time.Second)
	if err := queues[0].Schedule(ctx, "cancelled", cancelDue, nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := queues[1].Cancel(ctx, "cancelled"); err != nil || !ok {
		t.Fatalf("Cancel() = %v, %v; want true", ok, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got := len(fired)
		mu.Unlock()
		if (got >= n && time.Now().After(cancelDue)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for a duplicate firing to show
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if c := fired[fmt.Sprintf("job-%d", i)]; c != 1 {
			t.Errorf("job-%d fired %d times, want 1", i, c)
		}
	}
	if fired["cancelled"] != 0 {
		t.Errorf("cancelled job fired %d times, want 0", fired["cancelled"])
	}
	if len(early) > 0 {
		t.Errorf("jobs fired before their due time: %v", early)
	}
}
