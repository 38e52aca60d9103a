package delayq

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// queueMetrics are a queue's Prometheus collectors, labelled queue=<Name>.
type queueMetrics struct {
	pending  prometheus.Gauge
	inFlight prometheus.Gauge
	fired    prometheus.Counter
	retries  prometheus.Counter
	lateness prometheus.Observer
}

func newQueueMetrics(reg prometheus.Registerer, name string) *queueMetrics {
	labels := prometheus.Labels{"queue": name}
	return &queueMetrics{
		pending: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orderflow_delayq_pending_jobs", ConstLabels: labels,
			Help: "Firings waiting for their due time, as of this replica's last claim.",
		})),
		inFlight: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orderflow_delayq_in_flight_jobs", ConstLabels: labels,
			Help: "Handlers running on this replica.",
		})),
		fired: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderflow_delayq_fired_total", ConstLabels: labels,
			Help: "Jobs claimed and handed to a handler by this replica.",
		})),
		retries: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderflow_delayq_retries_total", ConstLabels: labels,
			Help: "Handler errors that scheduled a retry.",
		})),
		lateness: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "orderflow_delayq_lateness_seconds", ConstLabels: labels,
			Help:    "Time from a firing's due time to its handler start.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
		})),
	}
}

// register registers c with reg (when set) and returns the collector in
// use: an identical one registered before by another Queue of the same
// name is shared.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
