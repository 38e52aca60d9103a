package slotpool

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// poolMetrics are the pool's Prometheus series, labelled pool=<name>.
// Capacity, in use and waiting are pool-wide values as last seen by this
// replica (every script reports them; the janitor refreshes them each
// tick). Wait time and the counters are this replica's own share.
type poolMetrics struct {
	capacity  prometheus.Gauge
	inUse     prometheus.Gauge
	waiting   prometheus.Gauge
	wait      prometheus.Histogram
	reclaimed prometheus.Counter
	dropped   prometheus.Counter

	// Per priority, for this replica's own waiters. A fairness group is a
	// member: its id is personal data and never a label value.
	byPriority [2]classMetrics
}

// classMetrics are the series of one priority.
type classMetrics struct {
	waiting prometheus.Gauge
	grants  prometheus.Counter
	wait    prometheus.Observer
}

// class returns the series of priority p.
func (m *poolMetrics) class(p Priority) classMetrics {
	if p == High {
		return m.byPriority[1]
	}
	return m.byPriority[0]
}

func newMetrics(reg prometheus.Registerer, name string) *poolMetrics {
	opts := func(metric, help string) prometheus.Opts {
		return prometheus.Opts{
			Namespace: "orderflow", Subsystem: "slotpool", Name: metric, Help: help,
			ConstLabels: prometheus.Labels{"pool": name},
		}
	}
	waitOpts := opts("wait_seconds", "Time from Acquire to grant, for this replica's jobs.")
	m := &poolMetrics{
		capacity: prometheus.NewGauge(prometheus.GaugeOpts(opts("capacity", "Slots the downstream grants (N), across all replicas."))),
		inUse:    prometheus.NewGauge(prometheus.GaugeOpts(opts("in_use", "Slots held, across all replicas."))),
		waiting:  prometheus.NewGauge(prometheus.GaugeOpts(opts("waiting", "Jobs in the pending queue, across all replicas."))),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: waitOpts.Namespace, Subsystem: waitOpts.Subsystem, Name: waitOpts.Name, Help: waitOpts.Help,
			ConstLabels: waitOpts.ConstLabels, Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts(opts("reclaimed_leases_total",
			"Expired holder leases reclaimed by this replica's calls."))),
		dropped: prometheus.NewCounter(prometheus.CounterOpts(opts("dropped_waiters_total",
			"Stale pending waiters (heartbeat expired) dropped by this replica's calls."))),
	}
	waiting := prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("priority_waiting",
		"This replica's jobs waiting for a slot, per priority (normal, high).")), []string{"priority"})
	grants := prometheus.NewCounterVec(prometheus.CounterOpts(opts("priority_grants_total",
		"Slots granted to this replica's jobs, per priority (normal, high).")), []string{"priority"})
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: waitOpts.Namespace, Subsystem: waitOpts.Subsystem, Name: "priority_wait_seconds",
		Help:        "Time from Acquire to grant for this replica's jobs, per priority (normal, high).",
		ConstLabels: waitOpts.ConstLabels, Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"priority"})
	if reg != nil {
		m.capacity = register(reg, m.capacity)
		m.inUse = register(reg, m.inUse)
		m.waiting = register(reg, m.waiting)
		m.wait = register(reg, m.wait)
		m.reclaimed = register(reg, m.reclaimed)
		m.dropped = register(reg, m.dropped)
		waiting = register(reg, waiting)
		grants = register(reg, grants)
		wait = register(reg, wait)
	}
	for i, p := range []Priority{Normal, High} {
		m.byPriority[i] = classMetrics{
			waiting: waiting.WithLabelValues(p.String()),
			grants:  grants.WithLabelValues(p.String()),
			wait:    wait.WithLabelValues(p.String()),
		}
	}
	return m
}

// register registers c, or returns the collector already registered under
// the same description (two Pools of one name in one process share series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

func (m *poolMetrics) observe(r result) {
	m.capacity.Set(float64(r.capacity))
	m.inUse.Set(float64(r.inUse))
	m.waiting.Set(float64(r.waiting))
	if r.reclaimed > 0 {
		m.reclaimed.Add(float64(r.reclaimed))
	}
	if r.dropped > 0 {
		m.dropped.Add(float64(r.dropped))
	}
}
