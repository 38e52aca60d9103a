package slotpool

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsNameNoMember: members hold and wait for slots, yet no label
// value of the pool's metrics is a member id (metrics are read by a
// scraper, not only by admins); the per-class series are by priority.
func TestMetricsNameNoMember(t *testing.T) {
	members := []string{"alice@example.com", "bob-42", "carol.k"}
	reg := prometheus.NewRegistry()
	p := replicas(t, 1, Options{Capacity: 1, Lease: 5 * time.Second, Registerer: reg})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := p.AcquireClass(ctx, "job-0", Class{Group: members[0], Priority: High})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan acquired, 2)
	for i, m := range members[1:] {
		go func() {
			s, err := p.AcquireClass(ctx, "job-"+m, Class{Group: m, Priority: Priority(i % 2)})
			ch <- acquired{s, err}
		}()
	}
	waitFor(t, "two waiters queued", func() bool { return len(mustSnapshot(t, p).Pending) == 2 })

	check := func(when string) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					for _, member := range members {
						if strings.Contains(l.GetValue(), member) {
							t.Errorf("%s: %s{%s=%q} names member %s", when, mf.GetName(), l.GetName(), l.GetValue(), member)
						}
					}
				}
			}
		}
	}
	check("while members wait")
	if got := gatheredWith(t, reg, "orderflow_slotpool_priority_waiting", "priority", "normal").GetGauge().GetValue(); got != 1 {
		t.Errorf("orderflow_slotpool_priority_waiting{priority=normal} = %v, want 1", got)
	}
	if err := held.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	for range 2 { // granted one after the other: each is released in turn
		a := <-ch
		if a.err != nil {
			t.Fatal(a.err)
		}
		if err := a.slot.Release(ctx, Completed, ""); err != nil {
			t.Fatal(err)
		}
	}
	check("after the grants")
	for prio, want := range map[string]float64{"high": 2, "normal": 1} {
		if got := gatheredWith(t, reg, "orderflow_slotpool_priority_grants_total", "priority", prio).GetCounter().GetValue(); got != want {
			t.Errorf("orderflow_slotpool_priority_grants_total{priority=%s} = %v, want %v", prio, got, want)
		}
	}
}

// gatheredWith returns the sample of family name whose label has value.
func gatheredWith(t *testing.T, reg *prometheus.Registry, name, label, value string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m
				}
			}
		}
	}
	t.Fatalf("metric %s{%s=%q} not gathered", name, label, value)
	return nil
}
