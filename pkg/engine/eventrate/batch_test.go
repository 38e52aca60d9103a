package eventrate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// writes counts the scripts a client runs (EVALSHA and EVAL).
type writes struct{ n atomic.Int64 }

func (w *writes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (w *writes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			w.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (w *writes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestBatcherWritesManyAddsAsOneAndFlushesOnStop(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	var w writes
	rdb.AddHook(&w)
	c := eventrate.New(rdb, prefix)
	b := eventrate.NewBatcher(c, time.Hour, func(err error) { t.Error(err) })

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				_ = b.AddAll(ctx, map[string]int64{eventrate.TaskFinished: 1, eventrate.TaskFailed + "10009": 2})
			}
		})
	}
	wg.Wait()
	if n := w.n.Load(); n != 0 {
		t.Fatalf("%d writes before the batcher ran, want none", n)
	}
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	b.Run(runCtx) // stops at once, writing what it holds
	// One write, plus a reload if the script was not cached yet.
	if n := w.n.Load(); n < 1 || n > 2 {
		t.Errorf("%d script calls for 200 adds, want one write", n)
	}
	win, err := c.Windows(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := win[0].Counts[eventrate.TaskFinished]; got != 200 {
		t.Errorf("finished = %d, want 200", got)
	}
	if got := win[0].Counts[eventrate.TaskFailed+"10009"]; got != 400 {
		t.Errorf("failed = %d, want 400", got)
	}
}

func TestBatcherWritesEveryInterval(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	c := eventrate.New(rdb, prefix)
	b := eventrate.NewBatcher(c, 50*time.Millisecond, func(err error) { t.Error(err) })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { b.Run(runCtx); close(done) }()
	defer func() { cancel(); <-done }()
	_ = b.AddAll(ctx, map[string]int64{eventrate.TaskFinished: 3})
	deadline := time.Now().Add(5 * time.Second)
	for {
		win, err := c.Windows(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if win[0].Counts[eventrate.TaskFinished] == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("finished = %d after 5 s of a running batcher, want 3", win[0].Counts[eventrate.TaskFinished])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
