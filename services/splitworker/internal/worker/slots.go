package worker

import "context"

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

// UnlimitedSlots is the no-cap mode: every Acquire succeeds at once and
// the fulfilment system's own 429 answers are the only limit (the worker
// backs off and retries them). It stands in where no running pool is
// configured, for example in tests of the worker alone.
type UnlimitedSlots struct{}

// Acquire returns a slot at once.
func (UnlimitedSlots) Acquire(context.Context, string) (Slot, error) { return unlimitedSlot{}, nil }

type unlimitedSlot struct{}

func (unlimitedSlot) KeepAlive(context.Context, func())           {}
func (unlimitedSlot) Release(context.Context, bool, string) error { return nil }
