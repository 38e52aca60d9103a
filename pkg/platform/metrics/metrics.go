// Package metrics builds each service's Prometheus registry and its
// /metrics handler. Every metric of orderflow's own is named orderflow_…;
// the registry also carries orderflow_build_info and the Go runtime and
// process collectors (go_…, process_…, their standard names).
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orderflow/orderflow/pkg/platform/buildinfo"
	"github.com/orderflow/orderflow/pkg/platform/cost"
)

// Namespace prefixes every orderflow metric.
const Namespace = "orderflow"

// NewRegistry returns a registry with orderflow_build_info, the Go
// runtime and process collectors and the order steps' costs
// (orderflow_step_*_total, package cost).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	bi := buildinfo.Read()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels name the running binary's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	info.Set(1)
	reg.MustRegister(
		info,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		cost.Collector(),
	)
	return reg
}

// Handler serves reg in the Prometheus exposition format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
