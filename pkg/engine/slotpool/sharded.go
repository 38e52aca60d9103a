package slotpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// MaxShards bounds the number of shards of a Sharded pool.
const MaxShards = 256

// Sharded is a running pool of N slots split over k shard pools, so that on
// a Redis Cluster its scripts spread over up to k masters instead of the one
// holding the single hash tag {<name>}. Shard i is an ordinary Pool named
// "<name>:s<i>" (keys under {<name>:s<i>}) holding N ÷ k slots, the
// remainder going one each to the first shards; the shards' capacities add
// up to N, so never more than N jobs hold a slot across all of them.
//
// A waiter is queued on the shard of its job id: FNV-1a of the id up to its
// last '/' (the whole id when it has none) modulo k, so the jobs
// "<order>/1", "<order>/2", … of one order share a shard. Everything done
// with a granted Slot (renew, confirm, release) goes to its shard; Evict
// finds the shard holding the token; SetCapacity, SetFairness, SetWeight
// and Tick go to every shard; Snapshot and Finished merge them.
//
// With k = 1 it is exactly the Pool named <name> (the same keys as an
// unsharded pool). What sharding gives up, for k > 1:
//   - A job waits for a slot of its own shard even while another shard has
//     one free, so the pool may run fewer than N jobs while jobs wait
//     (little when N ÷ k is large), and one order runs at most N ÷ k of its
//     jobs at once.
//   - Fair queuing (weights, priorities, the anti-starvation bound) and the
//     FIFO order hold within each shard, not across them.
//   - The group cap K becomes ⌈K ÷ k⌉ per shard: a group never holds more
//     than that on one shard, and at most k × ⌈K ÷ k⌉ (≥ K, at most K + k −
//     1) in all. Without a cap a group whose orders hash over every shard
//     (a member submitting many orders) may use all N slots.
//
// When N < k, shards N … k−1 get no slot. A new waiter whose shard has none
// (as last seen by this process: every answer of a shard's script reports
// its capacity, and the janitor asks every CheckInterval) is queued on a
// shard that has one, chosen by the same hash among those; with N = 0 (a
// pause) it waits on its own shard. A waiter already queued on a shard
// when that shard's share drops to 0 waits there until N is raised to k or
// more again, or its context ends.
//
// Every replica and every view of the pool (the gateway's operations API)
// must use the same k: a replica using another k takes slots from other
// keys, so up to twice N jobs may run while two values are deployed. Change
// k with the split-workers stopped.
type Sharded struct {
	name  string
	pools []*Pool
}

// NewSharded returns a pool of shards shard pools (1 to MaxShards; values
// outside are clamped) on rdb, splitting opts.Capacity and opts.GroupCap
// over them as SetCapacity and SetFairness do. It does not touch Redis.
func NewSharded(rdb redis.UniversalClient, opts Options, shards int) *Sharded {
	shards = min(max(shards, 1), MaxShards)
	if opts.Name == "" {
		opts.Name = "orderflow:slotpool"
	}
	s := &Sharded{name: opts.Name, pools: make([]*Pool, shards)}
	if shards == 1 {
		s.pools[0] = New(rdb, opts)
		return s
	}
	capacity := max(opts.Capacity, 1)
	groupCap := max(opts.GroupCap, 0)
	for i := range s.pools {
		o := opts
		o.Name = ShardName(opts.Name, i)
		o.Capacity = ShardCapacity(capacity, shards, i)
		o.GroupCap = ShardGroupCap(groupCap, shards)
		p := New(rdb, o)
		if o.Capacity == 0 {
			// New raises a capacity below 1 to 1; this shard's share is none.
			p.capacity, p.common[0] = 0, 0
			p.seenCap.Store(0)
		}
		s.pools[i] = p
	}
	return s
}

// ShardName is the name of shard i of the pool name (its hash tag is
// {<name>:s<i>}).
func ShardName(name string, i int) string { return name + ":s" + strconv.Itoa(i) }

// ShardCapacity is shard i's share of n slots over k shards: n ÷ k, plus
// one for each of the first n mod k shards.
func ShardCapacity(n, k, i int) int {
	c := n / k
	if i < n%k {
		c++
	}
	return c
}

// ShardGroupCap is each shard's group cap for a pool-wide cap of groupCap
// over k shards: ⌈groupCap ÷ k⌉, 0 (no cap) staying 0.
func ShardGroupCap(groupCap, k int) int {
	if groupCap <= 0 {
		return 0
	}
	return (groupCap + k - 1) / k
}

// Name returns the pool's name (the shards' names start with it).
func (s *Sharded) Name() string { return s.name }

// Shards returns the shard pools, shard i at index i.
func (s *Sharded) Shards() []*Pool { return slices.Clone(s.pools) }

// homeShard returns the shard of a job id by its hash alone, and the hash:
// FNV-1a of the id up to its last '/' (the whole id when it has none).
func (s *Sharded) homeShard(jobID string) (int, uint32) {
	key := jobID
	if i := strings.LastIndexByte(jobID, '/'); i >= 0 {
		key = jobID[:i]
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	sum := h.Sum32()
	return int(sum % uint32(len(s.pools))), sum
}

// shardOf returns the shard a new waiter of jobID queues on: its home
// shard, unless that shard was last seen with no slot while others have
// some (see Sharded).
func (s *Sharded) shardOf(jobID string) int {
	if len(s.pools) == 1 {
		return 0
	}
	i, sum := s.homeShard(jobID)
	if s.pools[i].seenCap.Load() > 0 {
		return i
	}
	var open []int
	for j, p := range s.pools {
		if p.seenCap.Load() > 0 {
			open = append(open, j)
		}
	}
	if len(open) == 0 {
		return i
	}
	return open[sum%uint32(len(open))]
}

// Acquire queues jobID in the default class on its shard (see
// Pool.Acquire).
func (s *Sharded) Acquire(ctx context.Context, jobID string) (*Slot, error) {
	return s.AcquireClass(ctx, jobID, Class{})
}

// AcquireClass queues jobID in class c on its shard and blocks until that
// shard grants it a slot (see Pool.AcquireClass).
func (s *Sharded) AcquireClass(ctx context.Context, jobID string, c Class) (*Slot, error) {
	return s.pools[s.shardOf(jobID)].AcquireClass(ctx, jobID, c)
}

// each runs fn on every shard at once and joins their errors.
func (s *Sharded) each(fn func(i int, p *Pool) error) error {
	if len(s.pools) == 1 {
		return fn(0, s.pools[0])
	}
	errs := make([]error, len(s.pools))
	var wg sync.WaitGroup
	for i, p := range s.pools {
		wg.Go(func() { errs[i] = fn(i, p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Evict frees the slot granted under token on the shard holding it (see
// Pool.Evict). It returns ErrLost when no shard has a holder of that token.
func (s *Sharded) Evict(ctx context.Context, token, detail string) error {
	if len(s.pools) == 1 {
		return s.pools[0].Evict(ctx, token, detail)
	}
	cmds := make([]*redis.FloatCmd, len(s.pools))
	_, err := s.pools[0].rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, p := range s.pools {
			cmds[i] = pipe.ZScore(ctx, p.keys[keyHolders], token)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("evict slot %s: %w", token, err)
	}
	for i, c := range cmds {
		if c.Err() == nil {
			return s.pools[i].Evict(ctx, token, detail)
		}
	}
	return fmt.Errorf("evict slot %s: %w", token, ErrLost)
}

// SetCapacity sets N for every replica at once, each shard's share as
// ShardCapacity says (see Pool.SetCapacity). A shard's share never falls
// when N rises nor rises when N falls, so while the shards change one by
// one no more than the larger of the old and new N are granted. On error
// some shards may have their new share: call it again.
func (s *Sharded) SetCapacity(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("set capacity of %s: negative capacity %d", s.name, n)
	}
	k := len(s.pools)
	return s.each(func(i int, p *Pool) error { return p.SetCapacity(ctx, ShardCapacity(n, k, i)) })
}

// SetFairness sets, on every shard, the group cap ShardGroupCap(groupCap, k)
// and the anti-starvation bound starveAfter (see Pool.SetFairness).
func (s *Sharded) SetFairness(ctx context.Context, groupCap, starveAfter int) error {
	if starveAfter == 0 {
		return fmt.Errorf("set fairness of %s: starvation bound must be at least 1", s.name)
	}
	if groupCap > 0 {
		groupCap = ShardGroupCap(groupCap, len(s.pools))
	}
	return s.each(func(_ int, p *Pool) error { return p.SetFairness(ctx, groupCap, starveAfter) })
}

// SetWeight sets group's weight on every shard (see Pool.SetWeight).
func (s *Sharded) SetWeight(ctx context.Context, group string, weight int) error {
	return s.each(func(_ int, p *Pool) error { return p.SetWeight(ctx, group, weight) })
}

// Tick runs one janitor pass on every shard.
func (s *Sharded) Tick(ctx context.Context) error {
	return s.each(func(_ int, p *Pool) error { return p.Tick(ctx) })
}

// Run runs every shard's janitor until ctx ends. It returns nil.
func (s *Sharded) Run(ctx context.Context) error {
	return s.each(func(_ int, p *Pool) error { return p.Run(ctx) })
}

// Snapshot reads every shard (each in one transaction) and sums them:
// Capacity, Reclaimed and each group's holdings and waiters are sums,
// Holders are sorted by lease deadline and Pending by arrival time, and
// GroupCap is the most one group may hold over all shards (0 when a shard
// has no cap). Shards lists each shard's counts when k > 1.
func (s *Sharded) Snapshot(ctx context.Context) (Snapshot, error) {
	if len(s.pools) == 1 {
		return s.pools[0].Snapshot(ctx)
	}
	snaps := make([]Snapshot, len(s.pools))
	if err := s.each(func(i int, p *Pool) (err error) {
		snaps[i], err = p.Snapshot(ctx)
		return err
	}); err != nil {
		return Snapshot{}, err
	}
	out := Snapshot{Holders: []Holder{}, Orphaned: []Orphan{}, Pending: []Waiter{}, Groups: []GroupState{}}
	groups := map[string]*GroupState{}
	capped := true
	for i, sn := range snaps {
		out.Capacity += sn.Capacity
		out.Reclaimed += sn.Reclaimed
		out.GroupCap += sn.GroupCap
		capped = capped && sn.GroupCap > 0
		out.StarveAfter = max(out.StarveAfter, sn.StarveAfter)
		out.Origin = Origins{Capacity: latest(out.Origin.Capacity, sn.Origin.Capacity),
			Fairness: latest(out.Origin.Fairness, sn.Origin.Fairness), Weights: latest(out.Origin.Weights, sn.Origin.Weights)}
		out.Holders = append(out.Holders, sn.Holders...)
		out.Orphaned = append(out.Orphaned, sn.Orphaned...)
		out.Pending = append(out.Pending, sn.Pending...)
		out.Shards = append(out.Shards, ShardState{Shard: i, Pool: s.pools[i].name,
			Capacity: sn.Capacity, InUse: len(sn.Holders) + len(sn.Orphaned), Waiting: len(sn.Pending)})
		for _, g := range sn.Groups {
			gs, ok := groups[g.Group]
			if !ok {
				gs = &GroupState{Group: g.Group, Weight: g.Weight}
				groups[g.Group] = gs
			}
			gs.Weight = max(gs.Weight, g.Weight)
			gs.Holding += g.Holding
			gs.Waiting += g.Waiting
			gs.WaitingHigh += g.WaitingHigh
			gs.OldestWait = max(gs.OldestWait, g.OldestWait)
		}
	}
	if !capped {
		out.GroupCap = 0
	}
	slices.SortStableFunc(out.Holders, func(a, b Holder) int { return a.LeaseUntil.Compare(b.LeaseUntil) })
	slices.SortStableFunc(out.Orphaned, func(a, b Orphan) int { return a.Until.Compare(b.Until) })
	slices.SortStableFunc(out.Pending, func(a, b Waiter) int { return a.Since.Compare(b.Since) })
	for _, gs := range groups {
		out.Groups = append(out.Groups, *gs)
	}
	slices.SortFunc(out.Groups, func(a, b GroupState) int { return cmp.Compare(a.Group, b.Group) })
	return out, nil
}

// Finished returns up to count finished jobs of all shards, newest first.
func (s *Sharded) Finished(ctx context.Context, count int) ([]Finished, error) {
	if len(s.pools) == 1 {
		return s.pools[0].Finished(ctx, count)
	}
	lists := make([][]Finished, len(s.pools))
	if err := s.each(func(i int, p *Pool) (err error) {
		lists[i], err = p.Finished(ctx, count)
		return err
	}); err != nil {
		return nil, err
	}
	out := slices.Concat(lists...)
	slices.SortStableFunc(out, func(a, b Finished) int { return b.Time.Compare(a.Time) })
	return out[:min(len(out), count)], nil
}

// Handler serves the summed Snapshot as JSON (see Pool.Handler).
func (s *Sharded) Handler() http.Handler { return snapshotHandler(s) }

// CapacityHandler changes N at run time (see Pool.CapacityHandler).
func (s *Sharded) CapacityHandler() http.Handler { return capacityHandler(s) }

// WeightHandler sets a group's weight on every shard (see
// Pool.WeightHandler).
func (s *Sharded) WeightHandler() http.Handler { return weightHandler(s) }

// FairnessHandler changes the group cap and the anti-starvation bound on
// every shard (see Pool.FairnessHandler and SetFairness).
func (s *Sharded) FairnessHandler() http.Handler { return fairnessHandler(s) }
