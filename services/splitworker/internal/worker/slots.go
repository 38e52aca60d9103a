package worker

import (
	"context"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
)

// Slots grants the right to run one job at the fulfilment system, which
// accepts only N jobs at once across all worker replicas. Acquire blocks
// (in a first-come, first-served queue) until a slot is free or ctx ends.
// The Redis running pool (pkg/slotpool) implements it in production.
type Slots interface {
	Acquire(ctx context.Context, jobID string) (Slot, error)
}

// Slot is a granted slot.
type Slot interface {
	// KeepAlive renews the slot's lease until ctx ends and calls lost if
	// the lease was lost.
	KeepAlive(ctx context.Context, lost func())
	// Release frees the slot, recording whether the job completed and a
	// detail for the finished stream.
	Release(ctx context.Context, completed bool, detail string) error
}

// PoolSlots takes slots from the Redis running pool (pkg/slotpool), which
// caps the fulfilment system's concurrent jobs across every replica.
type PoolSlots struct {
	Pool *slotpool.Pool
}

// Acquire waits in the pool's FIFO queue for a slot.
func (p PoolSlots) Acquire(ctx context.Context, jobID string) (Slot, error) {
	s, err := p.Pool.Acquire(ctx, jobID)
	if err != nil {
		return nil, err
	}
	return poolSlot{s}, nil
}

type poolSlot struct{ *slotpool.Slot }

// Release records the job's outcome in the pool's finished stream.
func (s poolSlot) Release(ctx context.Context, completed bool, detail string) error {
	outcome := slotpool.Failed
	if completed {
		outcome = slotpool.Completed
	}
	return s.Slot.Release(ctx, outcome, detail)
}
