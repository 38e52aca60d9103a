package taskstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// liveCost is the task store's cost with n live tasks: Redis bytes per
// task and the round trips of a status read and of a full read.
type liveCost struct {
	tasks        int
	bytesPerTask float64
	status, get  []time.Duration // sorted
	loadRate     float64
}

// curveReads is how many status and full reads are timed at each size.
const curveReads = 2000

// liveCurve creates n PROCESSING tasks of a two-item order, spread over a
// thousand members, on a redis-server of its own (64 writers, one round
// trip each, as the gateway writes them), then times curveReads status
// reads and full reads of random tasks.
func liveCurve(tb testing.TB, n int) liveCost {
	tb.Helper()
	srv := testenv.StartRedis(tb, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 80})
	defer rdb.Close()
	ctx := context.Background()
	store := taskstore.New(rdb, taskstore.Options{Prefix: "curve"})
	type ref struct{ member, id string }
	refs := make([]ref, n)
	member := func(i int) string { return fmt.Sprintf("member-%04d", i%1000) }
	before := testenv.UsedMemory(tb, rdb)
	start := time.Now()
	const writers = 64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				id, err := taskstore.NewID()
				if err != nil {
					errs <- err
					return
				}
				code := fmt.Sprintf("ORD%017d", i)
				job, err := proto.Marshal(&jobv1.SplitJob{TaskId: id, MemberId: member(i), OrderCode: code, SchemaVersion: 1,
					Items: []*taskv1.OrderItem{{ItemCode: "A1", Sku: "SKU-TEA-500G", Quantity: 2}, {ItemCode: "A2", Sku: "SKU-KETTLE", Quantity: 1}}})
				if err != nil {
					errs <- err
					return
				}
				task := &taskv1.Task{TaskId: id, Kind: taskv1.TaskKind_TASK_KIND_ORDER_SPLIT, OrderCode: code}
				if _, _, err := store.Create(ctx, member(i), task, job); err != nil {
					errs <- err
					return
				}
				refs[i] = ref{member(i), id}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	c := liveCost{tasks: n, loadRate: float64(n) / time.Since(start).Seconds()}
	c.bytesPerTask = float64(testenv.UsedMemory(tb, rdb)-before) / float64(n)
	for range curveReads {
		r := refs[rand.IntN(n)]
		t0 := time.Now()
		st, err := store.Status(ctx, r.member, r.id)
		c.status = append(c.status, time.Since(t0))
		if err != nil || st != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			tb.Fatalf("Status(%s) = %v, %v; want PROCESSING", r.id, st, err)
		}
		t0 = time.Now()
		if _, err := store.Get(ctx, r.member, r.id); err != nil {
			tb.Fatalf("Get(%s) = %v", r.id, err)
		}
		c.get = append(c.get, time.Since(t0))
	}
	slices.Sort(c.status)
	slices.Sort(c.get)
	return c
}

// TestLiveCurveHarness runs the cost curve at its smallest size, so make
// test keeps the harness working.
func TestLiveCurveHarness(t *testing.T) {
	c := liveCurve(t, 1000)
	if c.bytesPerTask <= 0 || c.bytesPerTask > 4096 {
		t.Errorf("%.0f bytes per live task, want between 0 and 4 KiB", c.bytesPerTask)
	}
	if len(c.status) != curveReads || len(c.get) != curveReads {
		t.Errorf("timed %d status and %d full reads, want %d each", len(c.status), len(c.get), curveReads)
	}
}

// BenchmarkLiveCurve records the task store's cost curve: bytes per live
// task and the p50/p99 round trip of a status read and a full read with
// 10^3 to 10^6 tasks live, each size on a redis-server of its own.
func BenchmarkLiveCurve(b *testing.B) {
	for b.Loop() {
		for _, n := range []int{1e3, 1e4, 1e5, 1e6} {
			c := liveCurve(b, n)
			params := "tasks=" + benchrec.FormatNumber(float64(n))
			point := func(series string) *benchrec.Point {
				return &benchrec.Point{Series: series, X: float64(n), XLabel: "live tasks"}
			}
			benchrec.Record(b, benchrec.Figure{Group: benchrec.CurveGroup, Name: "live task bytes per task", Params: params,
				Value: c.bytesPerTask, Unit: "B", Better: benchrec.Lower, Curve: point("live tasks: bytes"),
				Note: fmt.Sprintf("created at %.0f tasks/s", c.loadRate)})
			benchrec.RecordCurveLatencies(b, "live task", params, float64(n), "live tasks",
				benchrec.Latencies{Name: "status read", Sorted: c.status},
				benchrec.Latencies{Name: "full read", Sorted: c.get})
		}
	}
}
