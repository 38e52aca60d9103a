package slotpool

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// seen is what a snapshot says of N, K, the starvation bound, the weights
// and the sources and actors of their origins.
type seen struct {
	Capacity, GroupCap, StarveAfter int
	Weights                         map[string]int
	Origins                         [3]string // "source/actor" of capacity, fairness, weights
}

func seenOf(s Snapshot) seen {
	out := seen{Capacity: s.Capacity, GroupCap: s.GroupCap, StarveAfter: s.StarveAfter, Weights: map[string]int{}}
	for _, g := range s.Groups {
		if g.Weight != 1 {
			out.Weights[g.Group] = g.Weight
		}
	}
	for i, o := range []*Origin{s.Origin.Capacity, s.Origin.Fairness, s.Origin.Weights} {
		if o != nil {
			out.Origins[i] = string(o.Source) + "/" + o.Actor
		}
	}
	return out
}

// TestSeedKeepsTheOperatorsValues: a start (Seed) writes the configured
// settings where none is stored or configuration wrote the stored one,
// never over a value an operator set; ResetToConfiguration writes them
// whoever set the current ones.
func TestSeedKeepsTheOperatorsValues(t *testing.T) {
	ctx := context.Background()
	ops := WithActor(ctx, "ops")
	cfg := Settings{Capacity: 4, GroupCap: 2, StarveAfter: 3, Weights: map[string]int{"m-1": 2, "m-2": 1}}
	const conf, oper = "configuration/worker-1", "operator/ops"
	steps := []struct {
		name string
		do   func(p *Pool) error
		want seen
	}{
		{"first start", func(p *Pool) error { return p.Seed(ctx, cfg) },
			seen{4, 2, 3, map[string]int{"m-1": 2}, [3]string{conf, conf, conf}}},
		{"a start with a new configured N", func(p *Pool) error { c := cfg; c.Capacity = 6; return p.Seed(ctx, c) },
			seen{6, 2, 3, map[string]int{"m-1": 2}, [3]string{conf, conf, conf}}},
		{"operator pauses", func(p *Pool) error { return p.SetCapacity(ops, 0) },
			seen{0, 2, 3, map[string]int{"m-1": 2}, [3]string{oper, conf, conf}}},
		{"operator sets a weight", func(p *Pool) error { return p.SetWeight(ops, "m-3", 7) },
			seen{0, 2, 3, map[string]int{"m-1": 2, "m-3": 7}, [3]string{oper, conf, oper}}},
		{"operator sets the fairness", func(p *Pool) error { return p.SetFairness(ops, 5, -1) },
			seen{0, 5, 3, map[string]int{"m-1": 2, "m-3": 7}, [3]string{oper, oper, oper}}},
		{"another start", func(p *Pool) error { return p.Seed(ctx, cfg) },
			seen{0, 5, 3, map[string]int{"m-1": 2, "m-3": 7}, [3]string{oper, oper, oper}}},
		{"reset to configuration", func(p *Pool) error { return p.ResetToConfiguration(WithActor(ctx, "lead"), cfg) },
			seen{4, 2, 3, map[string]int{"m-1": 2}, [3]string{"configuration/lead", "configuration/lead", "configuration/lead"}}},
	}
	p := replicas(t, 1, Options{Capacity: 4, Replica: "worker-1"})[0]
	for _, st := range steps {
		if err := st.do(p); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, seenOf(mustSnapshot(t, p))); diff != "" {
			t.Errorf("after %s: snapshot (-want +got):\n%s", st.name, diff)
		}
	}
}

// TestSeedRefusesBadSettings: Seed names the setting out of range and
// writes nothing.
func TestSeedRefusesBadSettings(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 2})[0]
	for name, s := range map[string]Settings{
		"negative N":      {Capacity: -1, StarveAfter: 1},
		"negative K":      {Capacity: 1, GroupCap: -1, StarveAfter: 1},
		"no starve bound": {Capacity: 1},
		"weight 0":        {Capacity: 1, StarveAfter: 1, Weights: map[string]int{"m": 0}},
	} {
		if err := p.Seed(context.Background(), s); err == nil {
			t.Errorf("Seed(%s) = nil, want an error", name)
		}
	}
}

// TestShardedSeedSplitsAndKeepsTheOperatorsN: each shard is seeded with
// its share; an operator's N stays on every shard at the next start.
func TestShardedSeedSplitsAndKeepsTheOperatorsN(t *testing.T) {
	ctx := context.Background()
	s := shardedReplicas(t, 1, 3, Options{Capacity: 7})[0]
	cfg := Settings{Capacity: 7, StarveAfter: 4}
	if err := s.Seed(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if got, want := shardCapacities(t, s), []int{3, 2, 2}; !cmp.Equal(got, want) {
		t.Errorf("shard capacities after Seed(7) = %v, want %v", got, want)
	}
	if err := s.SetCapacity(WithActor(ctx, "ops"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Seed(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if got, want := shardCapacities(t, s), []int{0, 0, 0}; !cmp.Equal(got, want) {
		t.Errorf("shard capacities after the operator's 0 and Seed(7) = %v, want %v", got, want)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o := snap.Origin.Capacity; o == nil || o.Source != SourceOperator || o.Actor != "ops" {
		t.Errorf("Snapshot().Origin.Capacity = %+v, want the operator ops", o)
	}
}
