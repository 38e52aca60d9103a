package eventrate

import (
	"context"
	"sync"
	"time"
)

// Batcher adds counts to a Counter in batches: AddAll only adds to sums
// held here, and Run writes them every interval (and what is left when
// it stops) in one round trip, so a busy replica pays one write per
// interval instead of one per finished task. A count reaches Redis at
// most an interval late, in the minute of its write; a batch that fails
// is kept and written with the next.
type Batcher struct {
	c     *Counter
	every time.Duration
	warn  func(err error)

	mu   sync.Mutex
	sums map[string]int64
}

// NewBatcher returns a Batcher writing to c every interval; warn, when
// not nil, is told of a failed write.
func NewBatcher(c *Counter, every time.Duration, warn func(err error)) *Batcher {
	return &Batcher{c: c, every: every, warn: warn, sums: make(map[string]int64)}
}

// AddAll adds counts to the next write. It never fails.
func (b *Batcher) AddAll(_ context.Context, counts map[string]int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, n := range counts {
		b.sums[name] += n
	}
	return nil
}

// Run writes the sums every interval until ctx ends, then once more.
func (b *Batcher) Run(ctx context.Context) {
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			b.flush(fctx)
			return
		case <-t.C:
			b.flush(ctx)
		}
	}
}

// flush writes the sums; on failure they are added back for the next.
func (b *Batcher) flush(ctx context.Context) {
	b.mu.Lock()
	sums := b.sums
	b.sums = make(map[string]int64, len(sums))
	b.mu.Unlock()
	if len(sums) == 0 {
		return
	}
	if err := b.c.AddAll(ctx, sums); err != nil {
		if b.warn != nil {
			b.warn(err)
		}
		b.mu.Lock()
		for name, n := range b.sums {
			sums[name] += n
		}
		b.sums = sums
		b.mu.Unlock()
	}
}
