package worker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// latencyBuckets resolve the pickup and admission waits finely around
// their goal (a few milliseconds) and coarsely up to a backlog's minutes.
var latencyBuckets = []float64{.00025, .0005, .00075, .001, .0015, .002, .003, .004, .005, .0075, .01, .015, .02, .03, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// metrics are the worker's Prometheus series.
type metrics struct {
	tasks        *prometheus.CounterVec
	itemFailures *prometheus.CounterVec
	pickup       prometheus.Histogram
	endToEnd     prometheus.Histogram
	shipments    *prometheus.CounterVec
	deliveries   *prometheus.CounterVec
	admitted     prometheus.Histogram
	held         prometheus.Counter
	handedBack   prometheus.Counter
	overflowed   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderflow_splitworker_tasks_total",
			Help: "Tasks brought to a terminal status by the worker, by status and error code.",
		}, []string{"status", "error_code"}),
		itemFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderflow_splitworker_item_failures_total",
			Help: "Order items that failed, by error code.",
		}, []string{"error_code"}),
		pickup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orderflow_splitworker_pickup_seconds",
			Help:    "Time from submission to the start of processing.",
			Buckets: latencyBuckets,
		}),
		endToEnd: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orderflow_splitworker_task_seconds",
			Help:    "Time from submission to the terminal status.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}),
		shipments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderflow_splitworker_shipments_total",
			Help: "Shipment jobs finished at the fulfilment system, by outcome.",
		}, []string{"outcome"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderflow_splitworker_deliveries_total",
			Help: "Job deliveries handled, by queue and settlement (ack, requeue, reject).",
		}, []string{"queue", "settlement"}),
		admitted: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orderflow_splitworker_admission_wait_seconds",
			Help:    "Time a delivered split job waited at the per-member admission gate.",
			Buckets: latencyBuckets,
		}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderflow_splitworker_held_retries_total",
			Help: "Retries in place of deliveries held while a dependency was unreachable or the task's lease was held elsewhere.",
		}),
		handedBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderflow_splitworker_handed_back_total",
			Help: "Deliveries a stopping worker handed back to their queue without spending a delivery.",
		}),
		overflowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderflow_splitworker_overflow_moved_total",
			Help: "Split jobs moved to the overflow queue because their member had its backlog of jobs at this replica's gate.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.tasks, m.itemFailures, m.pickup, m.endToEnd, m.shipments, m.deliveries, m.admitted, m.held, m.handedBack, m.overflowed)
	}
	return m
}

func code(c int32) string { return strconv.Itoa(int(c)) }
