package slotpool

import (
	"errors"
	"sync"

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

	// Per fairness group, for this replica's own waiters; at most
	// maxGroups groups get their own label, the rest share "other".
	groupWaiting *prometheus.GaugeVec
	groupGrants  *prometheus.CounterVec
	groupWait    *prometheus.HistogramVec
	maxGroups    int
	mu           sync.Mutex
	groups       map[string]groupMetrics
}

// groupMetrics are the series of one fairness group.
type groupMetrics struct {
	waiting prometheus.Gauge
	grants  prometheus.Counter
	wait    prometheus.Observer
}

// otherGroup labels the groups beyond the label budget.
const otherGroup = "other"

// group returns the series of group g ("" is labelled "default").
func (m *poolMetrics) group(g string) groupMetrics {
	if g == "" {
		g = "default"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if gm, ok := m.groups[g]; ok {
		return gm
	}
	label := g
	if len(m.groups) >= m.maxGroups {
		label = otherGroup
	}
	gm := groupMetrics{
		waiting: m.groupWaiting.WithLabelValues(label),
		grants:  m.groupGrants.WithLabelValues(label),
		wait:    m.groupWait.WithLabelValues(label),
	}
	if label != otherGroup {
		m.groups[g] = gm
	}
	return gm
}

func newMetrics(reg prometheus.Registerer, name string, maxGroups int) *poolMetrics {
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
		groupWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("group_waiting",
			"This replica's jobs waiting for a slot, per fairness group.")), []string{"group"}),
		groupGrants: prometheus.NewCounterVec(prometheus.CounterOpts(opts("group_grants_total",
			"Slots granted to this replica's jobs, per fairness group.")), []string{"group"}),
		groupWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: waitOpts.Namespace, Subsystem: waitOpts.Subsystem, Name: "group_wait_seconds",
			Help:        "Time from Acquire to grant for this replica's jobs, per fairness group.",
			ConstLabels: waitOpts.ConstLabels, Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"group"}),
		maxGroups: maxGroups,
		groups:    make(map[string]groupMetrics),
	}
	if reg == nil {
		return m
	}
	m.capacity = register(reg, m.capacity)
	m.inUse = register(reg, m.inUse)
	m.waiting = register(reg, m.waiting)
	m.wait = register(reg, m.wait)
	m.reclaimed = register(reg, m.reclaimed)
	m.dropped = register(reg, m.dropped)
	m.groupWaiting = register(reg, m.groupWaiting)
	m.groupGrants = register(reg, m.groupGrants)
	m.groupWait = register(reg, m.groupWait)
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
