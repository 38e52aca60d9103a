package worker

import (
	"context"
	"errors"
	"sync"
)

// gate admits split jobs to work: at most total at once in this replica
// and at most perMember of one member, so one member's burst of jobs
// cannot take every handler. Jobs waiting at the gate are admitted round
// robin across members, first come first served within one member. A job
// waiting at the gate is still an unacknowledged delivery: it spends no
// delivery attempt and is redelivered if the replica dies.
type gate struct {
	total, perMember int

	mu      sync.Mutex
	running int
	held    map[string]int
	waiting map[string][]chan struct{}
	ring    []string // members with waiters, next to admit first
	calls   int      // enter calls so far
}

func newGate(total, perMember int) *gate {
	if perMember <= 0 || perMember > total {
		perMember = total
	}
	return &gate{total: total, perMember: perMember, held: map[string]int{}, waiting: map[string][]chan struct{}{}}
}

// errBacklogFull is enter's answer when member already has limit jobs
// running or waiting here.
var errBacklogFull = errors.New("member's backlog at the gate is full")

// enter blocks until member's job may run or ctx ends; after a nil error
// the caller must call leave. With limit > 0 it returns errBacklogFull at
// once, without queueing, when member already has limit jobs running or
// waiting at the gate.
func (g *gate) enter(ctx context.Context, member string, limit int) error {
	ch := make(chan struct{})
	g.mu.Lock()
	if limit > 0 && g.held[member]+len(g.waiting[member]) >= limit {
		g.mu.Unlock()
		return errBacklogFull
	}
	g.calls++
	if len(g.waiting[member]) == 0 {
		g.ring = append(g.ring, member)
	}
	g.waiting[member] = append(g.waiting[member], ch)
	g.admit()
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-ch: // admitted meanwhile: give the place back
		g.release(member)
		return ctx.Err()
	default:
	}
	q := g.waiting[member]
	for i, c := range q {
		if c == ch {
			g.waiting[member] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(g.waiting[member]) == 0 {
		g.drop(member)
	}
	return ctx.Err()
}

// leave ends a job admitted by enter.
func (g *gate) leave(member string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.release(member)
}

func (g *gate) release(member string) {
	g.running--
	if g.held[member]--; g.held[member] <= 0 {
		delete(g.held, member)
	}
	g.admit()
}

// admit lets waiting jobs in while there is room, one member at a time in
// ring order; a member that got a place moves to the back of the ring.
// The caller holds g.mu.
func (g *gate) admit() {
	for g.running < g.total {
		i := -1
		for j, m := range g.ring {
			if g.held[m] < g.perMember {
				i = j
				break
			}
		}
		if i < 0 {
			return
		}
		m := g.ring[i]
		q := g.waiting[m]
		close(q[0])
		g.running++
		g.held[m]++
		g.ring = append(g.ring[:i], g.ring[i+1:]...)
		if len(q) > 1 {
			g.waiting[m] = q[1:]
			g.ring = append(g.ring, m)
		} else {
			delete(g.waiting, m)
		}
	}
}

// drop removes member from the ring (it has no waiter left).
func (g *gate) drop(member string) {
	delete(g.waiting, member)
	for i, m := range g.ring {
		if m == member {
			g.ring = append(g.ring[:i], g.ring[i+1:]...)
			return
		}
	}
}
