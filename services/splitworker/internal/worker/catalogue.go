package worker

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
)

// catalogue is this replica's copy of the fulfilment catalogue, read at
// most once per maxAge (0: once per plan). Plans check SKUs, weights,
// warehouses and stock against it; the fulfilment system checks stock
// again when a shipment is created, and a shipment it rejects as out of
// stock fails its items with the out-of-stock code and drops the copy.
// Concurrent plans that find the copy stale share one read. The copy is
// indexed by SKU once per read.
type catalogue struct {
	fc     *fulfilment.Client
	clock  clock.Clock
	maxAge time.Duration
	reads  singleflight.Group

	mu   sync.Mutex
	skus plan.SKUs
	read time.Time // when skus was read; zero: no copy
}

// get returns the SKUs of a catalogue read at most maxAge ago.
func (c *catalogue) get(ctx context.Context) (plan.SKUs, error) {
	if c.maxAge <= 0 {
		cat, err := c.fc.Catalogue(ctx)
		if err != nil {
			return nil, err
		}
		return plan.Index(cat), nil
	}
	c.mu.Lock()
	skus, read := c.skus, c.read
	c.mu.Unlock()
	if !read.IsZero() && c.clock.Now().Sub(read) < c.maxAge {
		return skus, nil
	}
	ch := c.reads.DoChan("", func() (any, error) {
		// The read is shared, so one caller's end does not cancel it.
		started := c.clock.Now()
		cat, err := c.fc.Catalogue(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		skus := plan.Index(cat)
		c.mu.Lock()
		c.skus, c.read = skus, started
		c.mu.Unlock()
		return skus, nil
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(plan.SKUs), nil
	}
}

// drop forgets the copy: the next plan reads the catalogue again.
func (c *catalogue) drop() {
	c.mu.Lock()
	c.read = time.Time{}
	c.mu.Unlock()
}
