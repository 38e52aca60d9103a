// Package app wires the fulfilment-system simulator (package
// fulfilmentsim): its optional journal, its metrics and its HTTP server
// (the simulated API, /livez, /readyz, /healthz, /metrics).
package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderflow/orderflow/pkg/platform/metrics"
	"github.com/orderflow/orderflow/pkg/platform/probe"
	"github.com/orderflow/orderflow/pkg/platform/serve"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/pkg/sim/journal"
)

// Config is the simulator's configuration.
type Config struct {
	Addr      string        `env:"ORDERFLOW_FULFILMENT_ADDR" envDefault:"127.0.0.1:8082" desc:"Listen address of the fulfilment system simulator."`
	Capacity  int           `env:"ORDERFLOW_FULFILMENT_CAPACITY" envDefault:"4" desc:"Jobs the simulator runs at once; one more is refused for capacity." range:"≥ 0"`
	JobMin    time.Duration `env:"ORDERFLOW_FULFILMENT_JOB_MIN" envDefault:"200ms" desc:"Shortest simulated job." range:"≥ 0, ≤ JOB_MAX"`
	JobMax    time.Duration `env:"ORDERFLOW_FULFILMENT_JOB_MAX" envDefault:"800ms" desc:"Longest simulated job." range:"≥ JOB_MIN"`
	ErrorRate float64       `env:"ORDERFLOW_FULFILMENT_ERROR_RATE" envDefault:"0" desc:"Probability that a simulated job ends in ERROR." range:"0–1"`
	// StateFile, when set, journals accepted jobs so that a restarted
	// simulator remembers them (as the real system would).
	StateFile string `env:"ORDERFLOW_FULFILMENT_STATE_FILE" desc:"Journal of accepted jobs, so that a restarted simulator remembers them (empty: in memory only)."`
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Capacity < 0:
		return errors.New("ORDERFLOW_FULFILMENT_CAPACITY must not be negative")
	case c.JobMin < 0 || c.JobMax < c.JobMin:
		return errors.New("need 0 <= ORDERFLOW_FULFILMENT_JOB_MIN <= ORDERFLOW_FULFILMENT_JOB_MAX")
	case c.ErrorRate < 0 || c.ErrorRate > 1:
		return errors.New("ORDERFLOW_FULFILMENT_ERROR_RATE must be within [0, 1]")
	}
	return nil
}

// Run serves the fulfilment-system simulator until ctx ends. ready, when
// not nil, is called with the HTTP address once it listens.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready serve.Ready) error {
	log.Info("starting", "config", cfg) // config.Secret fields marshal masked

	sim := fulfilmentsim.New(fulfilmentsim.Options{
		Capacity:    cfg.Capacity,
		MinDuration: cfg.JobMin,
		MaxDuration: cfg.JobMax,
		ErrorRate:   cfg.ErrorRate,
	})
	if cfg.StateFile != "" {
		f, err := journal.Attach(cfg.StateFile, sim)
		if err != nil {
			return err
		}
		defer f.Close()
		log.Info("restored state", "file", cfg.StateFile, "created", sim.Stats().Created)
	}
	reg := metrics.NewRegistry()
	registerStats(reg, sim)

	mux := http.NewServeMux()
	mux.Handle("/", sim)
	probe.New(nil, nil).Register(mux) // no dependencies: /livez, /readyz, /healthz
	mux.Handle("GET /metrics", metrics.Handler(reg))

	return serve.ListenHTTP(ctx, log, cfg.Addr, mux, ready)
}

// registerStats exports the simulator's counters as Prometheus metrics.
func registerStats(reg *prometheus.Registry, sim *fulfilmentsim.Server) {
	gauge := func(name, help string, v func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "orderflow_fulfilmentsim_" + name, Help: help}, v))
	}
	counter := func(name, help string, v func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "orderflow_fulfilmentsim_" + name, Help: help}, v))
	}
	gauge("capacity", "Jobs that may run at once.", func() float64 { return float64(sim.Stats().Capacity) })
	gauge("running", "Jobs running now.", func() float64 { return float64(sim.Stats().Running) })
	gauge("max_concurrent", "Most jobs ever running at once.", func() float64 { return float64(sim.Stats().MaxConcurrent) })
	counter("created_total", "Shipment jobs accepted.", func() float64 { return float64(sim.Stats().Created) })
	counter("duplicates_total", "Requests that repeated an idempotency key.", func() float64 { return float64(sim.Stats().Duplicates) })
	counter("rejected_over_capacity_total", "Requests refused with 429.", func() float64 { return float64(sim.Stats().RejectedOverCapacity) })
	counter("completed_total", "Jobs that completed.", func() float64 { return float64(sim.Stats().Completed) })
	counter("failed_total", "Jobs that ended in ERROR.", func() float64 { return float64(sim.Stats().Failed) })
}
