package slotpool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Source says who set a pool setting's current value.
type Source string

const (
	// SourceConfiguration is a value written from the workers'
	// configuration: by Seed at a start, or by ResetToConfiguration.
	SourceConfiguration Source = "configuration"
	// SourceOperator is a value an operator set at run time (SetCapacity,
	// SetFairness, SetWeight). A start keeps it.
	SourceOperator Source = "operator"
)

// Origin records who set a setting's current value, and when.
type Origin struct {
	Source Source `json:"source"`
	// Actor is the operator (a member id, or "internal" for the service
	// token) or, for a value Seed wrote, the replica that started.
	Actor string    `json:"actor"`
	Time  time.Time `json:"time"`
}

// Origins are the origins of the pool's settings, nil where none is
// recorded (a value written before origins were recorded, or the
// default a script wrote for a pool nobody seeded).
type Origins struct {
	// Capacity is N's origin.
	Capacity *Origin `json:"capacity,omitempty"`
	// Fairness is the origin of the group cap and the starvation bound.
	Fairness *Origin `json:"fairness,omitempty"`
	// Weights is the origin of the groups' weights (all of them).
	Weights *Origin `json:"weights,omitempty"`
}

// Settings are the values a pool is configured with: what Seed writes at
// a start and ResetToConfiguration writes on request.
type Settings struct {
	// Capacity is N (0 pauses the pool).
	Capacity int
	// GroupCap is K, the most slots one group may hold (0: no cap).
	GroupCap int
	// StarveAfter is the anti-starvation bound (at least 1).
	StarveAfter int
	// Weights are the groups' weights (1 to MaxWeight); a group not named
	// has weight 1.
	Weights map[string]int
}

// Validate reports the first setting out of range.
func (s Settings) Validate() error {
	switch {
	case s.Capacity < 0:
		return fmt.Errorf("capacity %d: want at least 0", s.Capacity)
	case s.GroupCap < 0:
		return fmt.Errorf("group cap %d: want at least 0", s.GroupCap)
	case s.StarveAfter < 1:
		return fmt.Errorf("starvation bound %d: want at least 1", s.StarveAfter)
	}
	for g, w := range s.Weights {
		if err := (Class{Group: g}).validate(); err != nil {
			return fmt.Errorf("weight: %w", err)
		}
		if w < 1 || w > MaxWeight {
			return fmt.Errorf("weight of group %q: %d not in 1..%d", g, w, MaxWeight)
		}
	}
	return nil
}

type actorKey struct{}

// WithActor names, for SetCapacity, SetFairness, SetWeight and
// ResetToConfiguration called with the returned context, the operator
// recorded as the origin of the values they write.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// actorFrom returns the actor WithActor put on ctx, or "unknown".
func actorFrom(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return "unknown"
}

// Seed writes the configured settings s where none is stored or the
// stored one came from configuration, and records their origin; a value
// an operator set (SetCapacity, SetFairness, SetWeight) stays until an
// operator sets another or calls ResetToConfiguration. Every replica calls
// it at its start, in one script, so a start never undoes an operator's
// pause. The weights are one setting: once an operator set any weight, a
// start writes none.
func (p *Pool) Seed(ctx context.Context, s Settings) error {
	if err := p.seed(ctx, s, false, p.replica); err != nil {
		return fmt.Errorf("seed %s: %w", p.name, err)
	}
	return nil
}

// ResetToConfiguration writes the configured settings s whoever set the
// current values, recording the configuration as their origin and the
// actor of ctx (WithActor) as who asked.
func (p *Pool) ResetToConfiguration(ctx context.Context, s Settings) error {
	if err := p.seed(ctx, s, true, actorFrom(ctx)); err != nil {
		return fmt.Errorf("reset %s to configuration: %w", p.name, err)
	}
	return nil
}

func (p *Pool) seed(ctx context.Context, s Settings, force bool, actor string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	f := "0"
	if force {
		f = "1"
	}
	args := []any{s.Capacity, s.GroupCap, s.StarveAfter, f, actor}
	for _, g := range slices.Sorted(maps.Keys(s.Weights)) {
		args = append(args, g, s.Weights[g])
	}
	_, err := p.exec(ctx, seedOp, args...)
	return err
}

// parseOrigin reads "source|ms|actor" as the scripts write it.
func parseOrigin(v string) *Origin {
	src, rest, ok1 := strings.Cut(v, "|")
	ms, actor, ok2 := strings.Cut(rest, "|")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok1 || !ok2 || err != nil {
		return nil
	}
	return &Origin{Source: Source(src), Actor: actor, Time: time.UnixMilli(n)}
}

func readOrigins(h map[string]string) Origins {
	return Origins{Capacity: parseOrigin(h["capacity"]), Fairness: parseOrigin(h["fairness"]), Weights: parseOrigin(h["weights"])}
}

// latest returns the later of two origins (either may be nil).
func latest(a, b *Origin) *Origin {
	if a == nil || (b != nil && b.Time.After(a.Time)) {
		return b
	}
	return a
}

// Seed seeds every shard with its share of s (see Pool.Seed, and
// NewSharded for the shares).
func (s *Sharded) Seed(ctx context.Context, cfg Settings) error {
	return s.each(func(i int, p *Pool) error { return p.Seed(ctx, s.share(cfg, i)) })
}

// ResetToConfiguration writes every shard's share of cfg (see
// Pool.ResetToConfiguration).
func (s *Sharded) ResetToConfiguration(ctx context.Context, cfg Settings) error {
	return s.each(func(i int, p *Pool) error { return p.ResetToConfiguration(ctx, s.share(cfg, i)) })
}

// share is shard i's part of cfg: its share of N and the group cap.
func (s *Sharded) share(cfg Settings, i int) Settings {
	k := len(s.pools)
	if k == 1 {
		return cfg
	}
	cfg.Capacity = ShardCapacity(cfg.Capacity, k, i)
	cfg.GroupCap = ShardGroupCap(cfg.GroupCap, k)
	return cfg
}
