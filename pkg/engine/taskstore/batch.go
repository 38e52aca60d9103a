package taskstore

import (
	"context"
	"sync"

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
// created. The round trip does not end with ctx: a caller that goes away
// does not fail the others' commands (the client's timeouts bound it).
func (b *batcher) do(ctx context.Context, add func(redis.Pipeliner)) {
	c := &batchCall{add: add, wake: make(chan bool, 1)}
	b.mu.Lock()
	if b.running < b.max {
		b.running++
		b.mu.Unlock()
		b.send(ctx, c, []*batchCall{c})
		return
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	if <-c.wake {
		b.send(ctx, c, c.batch)
	}
}

// send sends batch, led by lead, then hands the callers queued meanwhile
// to the first of them and wakes the others of batch.
func (b *batcher) send(ctx context.Context, lead *batchCall, batch []*batchCall) {
	pipe := b.rdb.Pipeline()
	for _, c := range batch {
		c.add(pipe)
	}
	_, _ = pipe.Exec(context.WithoutCancel(ctx))
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
