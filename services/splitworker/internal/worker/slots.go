package worker

import (
	"context"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
)

// Slots grants the right to run one job at the fulfilment system, which
// accepts only N jobs at once across all worker replicas. Acquire blocks
// until a slot is granted to jobID's class (fair queuing across groups,
// first come first served within one) or ctx ends. The Redis running
// pool (pkg/engine/slotpool) implements it in production.
type Slots interface {
	Acquire(ctx context.Context, jobID string, c slotpool.Class) (Slot, error)
}

// Slot is a granted slot.
type Slot interface {
	// KeepAlive renews the slot's lease until ctx ends and calls lost if
	// the lease was lost or could not be renewed in time (the slot may
	// then still be held: it must not be released while its job may run).
	KeepAlive(ctx context.Context, lost func())
	// Confirm makes sure the slot is still held right before the
	// fulfilment request: at once while the grant or the last renewal is
	// recent, otherwise by renewing the lease. It returns an error
	// wrapping slotpool.ErrLost when the slot is no longer held.
	Confirm(ctx context.Context) error
	// Release frees the slot, recording whether the job completed and a
	// detail for the finished stream.
	Release(ctx context.Context, completed bool, detail string) error
}

// PoolSlots takes slots from the Redis running pool (pkg/engine/slotpool), which
// caps the fulfilment system's concurrent jobs across every replica.
type PoolSlots struct {
	Pool SlotPool
}

// SlotPool is a running pool: a *slotpool.Pool or a *slotpool.Sharded
// (which queues a shipment "<taskId>/<n>" on the shard of its task).
type SlotPool interface {
	AcquireClass(ctx context.Context, jobID string, c slotpool.Class) (*slotpool.Slot, error)
}

// Acquire waits in the pool's fair queue for a slot.
func (p PoolSlots) Acquire(ctx context.Context, jobID string, c slotpool.Class) (Slot, error) {
	s, err := p.Pool.AcquireClass(ctx, jobID, c)
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
