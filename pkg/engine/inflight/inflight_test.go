package inflight_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/engine/inflight"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestSumCountsLiveReportsOnly: the reports of two replicas add up; one
// that is not renewed leaves the sum once its TTL has passed (and is
// dropped from Redis), and a removed one leaves it at once.
func TestSumCountsLiveReportsOnly(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	b := inflight.New(rdb, prefix)
	if err := b.Report(ctx, "a", map[string]int64{"split": 3, "dead": 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.Report(ctx, "b", map[string]int64{"split": 2, "overflow": 4}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got, err := b.Sum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"split": 5, "overflow": 4, "dead": 1}, got.Held); diff != "" || got.Replicas != 2 {
		t.Errorf("Sum() = %v over %d replicas, want 2 replicas; held (-want +got):\n%s", got.Held, got.Replicas, diff)
	}
	time.Sleep(400 * time.Millisecond)
	got, err = b.Sum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"split": 3, "dead": 1}, got.Held); diff != "" || got.Replicas != 1 {
		t.Errorf("Sum() after b's report expired = %v over %d replicas, want 1 replica; held (-want +got):\n%s", got.Held, got.Replicas, diff)
	}
	if n := rdb.HLen(ctx, prefix+":{inflight}").Val(); n != 1 {
		t.Errorf("reports kept after the expired one was read = %d, want 1", n)
	}
	if err := b.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got, err = b.Sum(ctx); err != nil || got.Replicas != 0 || len(got.Held) != 0 {
		t.Errorf("Sum() after Remove = %+v, %v; want nothing", got, err)
	}
}

// TestHeartbeatRenewsAndRemovesOnStop: a heartbeat keeps a report with a
// TTL shorter than the test alive and removes the
// report when its context ends.
func TestHeartbeatRenewsAndRemovesOnStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	rdb, prefix := testenv.Redis(t)
	b := inflight.New(rdb, prefix)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Heartbeat(ctx, "r1", 50*time.Millisecond, 200*time.Millisecond, func() map[string]int64 {
			return map[string]int64{"split": 1}
		}, func(err error) { t.Errorf("heartbeat: %v", err) })
	}()
	time.Sleep(600 * time.Millisecond) // three TTLs: alive only if renewed
	got, err := b.Sum(context.Background())
	if err != nil || got.Replicas != 1 || got.Held["split"] != 1 {
		t.Errorf("Sum() while beating = %+v, %v; want 1 replica holding 1", got, err)
	}
	cancel()
	<-done
	if got, err := b.Sum(context.Background()); err != nil || got.Replicas != 0 {
		t.Errorf("Sum() after the heartbeat stopped = %+v, %v; want no replica", got, err)
	}
}
