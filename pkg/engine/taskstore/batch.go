package taskstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends the commands of concurrent callers to Redis together: at
// most max pipelines are in flight at once, and the callers that arrive
// while all of them are busy are sent as one pipeline by the first of them
// when a pipeline returns. A caller alone waits for nobody, so batching
// adds no latency at low load and saves a round trip's system calls, on
// both sides, per caller at high load.
type batcher struct {
	rdb redis.UniversalClient
	max int

	mu      sync.Mutex
	running int
	queue   []*batchCall
}

// batchCall is one caller's part of a batch.
type batchCall struct {
	ctx context.Context
	add func(redis.Pipeliner)
	// wake receives true when the caller is to send batch, false when its
	// commands have been sent and their results can be read.
	wake  chan bool
	batch []*batchCall
}

func newBatcher(rdb redis.UniversalClient, max int) *batcher {
	return &batcher{rdb: rdb, max: max}
}

// do queues the caller's commands with add and returns once they have
// been sent and answered; their results are read from the commands add
// created. A caller whose ctx ends while it still waits for a turn leaves
// the queue and gets ctx's error (add was not called). A batch is cut
// short only when every caller in it has gone away, so one caller leaving
// does not fail the others' commands.
func (b *batcher) do(ctx context.Context, add func(redis.Pipeliner)) error {
	c := &batchCall{ctx: ctx, add: add, wake: make(chan bool, 1)}
	b.mu.Lock()
	if b.running < b.max {
		b.running++
		b.mu.Unlock()
		b.send(c, []*batchCall{c})
		return nil
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case lead := <-c.wake:
		if lead {
			b.send(c, c.batch)
		}
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	for i, q := range b.queue {
		if q == c {
			b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
			b.mu.Unlock()
			return ctx.Err()
		}
	}
	b.mu.Unlock()
	// Already taken into a batch: see it through.
	if <-c.wake {
		b.send(c, c.batch)
	}
	return nil
}

// send sends batch, led by lead, then hands the callers queued meanwhile
// to the first of them and wakes the others of batch.
func (b *batcher) send(lead *batchCall, batch []*batchCall) {
	ctx, done := batchContext(lead.ctx, batch)
	pipe := b.rdb.Pipeline()
	for _, c := range batch {
		c.add(pipe)
	}
	_, _ = pipe.Exec(ctx)
	done()
	b.mu.Lock()
	if len(b.queue) > 0 {
		next := b.queue[0]
		next.batch, b.queue = b.queue, nil
		next.wake <- true
	} else {
		b.running--
	}
	b.mu.Unlock()
	for _, c := range batch {
		if c != lead {
			c.wake <- false
		}
	}
}

// batchContext carries lead's values (its trace) and ends when every
// caller of batch has gone away (cancelled or past its deadline); when
// every caller has a deadline it has the latest of them, which the Redis
// client also applies to the socket. done releases it. A batch of one
// caller runs on that caller's own context, which is all of that already.
func batchContext(lead context.Context, batch []*batchCall) (ctx context.Context, done func()) {
	if len(batch) == 1 {
		return lead, func() {}
	}
	ctx = context.WithoutCancel(lead)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	var cancelDeadline context.CancelFunc = func() {}
	if !latest.IsZero() {
		ctx, cancelDeadline = context.WithDeadline(ctx, latest)
	}
	ctx, cancel := context.WithCancel(ctx)
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
		cancelDeadline()
	}
}

// runScript runs script through b: EVALSHA in b's next pipeline, and
// again on its own when Redis did not know it (see orRun).
func (s *Store) runScript(ctx context.Context, b *batcher, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	if err := b.do(ctx, func(pipe redis.Pipeliner) { cmd = script.EvalSha(ctx, pipe, keys, args...) }); err != nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return s.orRun(ctx, cmd, script, keys, args...)
}

// orRun returns cmd, a pipelined EVALSHA of script, or, when Redis did not
// know the script (its cache is emptied by a restart, so the script did
// not run), the script run again on its own, loading it.
func (s *Store) orRun(ctx context.Context, cmd *redis.Cmd, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return script.Run(ctx, s.rdb, keys, args...)
	}
	return cmd
}
