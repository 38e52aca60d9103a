package worker

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
)

// catalogue is this replica's copy of the fulfilment catalogue, read at
// most once per maxAge (0: once per plan). Plans check SKUs, weights,
// warehouses and stock against it; the fulfilment system checks stock
// again when a shipment is created, and a shipment it rejects as out of
// stock fails its items with the out-of-stock code and drops the copy.
// Concurrent plans that find the copy stale share one read.
type catalogue struct {
	fc     *fulfilment.Client
	clock  clock.Clock
	maxAge time.Duration
	reads  singleflight.Group

	mu   sync.Mutex
	cat  fulfilment.Catalogue
	read time.Time // when cat was read; zero: no copy
}

// get returns a catalogue read at most maxAge ago.
func (c *catalogue) get(ctx context.Context) (fulfilment.Catalogue, error) {
	if c.maxAge <= 0 {
		return c.fc.Catalogue(ctx)
	}
	c.mu.Lock()
	cat, read := c.cat, c.read
	c.mu.Unlock()
	if !read.IsZero() && c.clock.Now().Sub(read) < c.maxAge {
		return cat, nil
	}
	ch := c.reads.DoChan("", func() (any, error) {
		// The read is shared, so one caller's end does not cancel it.
		started := c.clock.Now()
		cat, err := c.fc.Catalogue(context.WithoutCancel(ctx))
		if err == nil {
			c.mu.Lock()
			c.cat, c.read = cat, started
			c.mu.Unlock()
		}
		return cat, err
	})
	select {
	case <-ctx.Done():
		return fulfilment.Catalogue{}, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return fulfilment.Catalogue{}, r.Err
		}
		return r.Val.(fulfilment.Catalogue), nil
	}
}

// drop forgets the copy: the next plan reads the catalogue again.
func (c *catalogue) drop() {
	c.mu.Lock()
	c.read = time.Time{}
	c.mu.Unlock()
}
