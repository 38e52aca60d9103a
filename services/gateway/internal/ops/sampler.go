package ops

import (
	"context"
	"log/slog"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
)

// Names of the gauges the Sampler observes (eventrate.Counter.Observe).
const (
	// GaugeSlotUtilisation is the share of the running pool's slots held.
	GaugeSlotUtilisation = "slot.utilisation"
	// GaugeCheckLateness is how late the most overdue payment check is,
	// in seconds.
	GaugeCheckLateness = "check.lateness"
)

// DefaultSampleInterval is how often a Sampler samples when its Interval
// is 0.
const DefaultSampleInterval = 10 * time.Second

// SamplerOptions are a Sampler's dependencies.
type SamplerOptions struct {
	// Events records the samples and the submissions (required).
	Events *eventrate.Counter
	// Pool is the running pool whose utilisation is sampled; nil leaves
	// it out.
	Pool SlotPool
	// Reconciler answers the payment checks' lateness; nil leaves it out.
	Reconciler reconcilerv1.ReconcilerServiceClient
	// Accepted returns the replica's accepted submissions so far
	// (tasks.Server.Accepted); nil leaves them out.
	Accepted func() int64
	// Interval is how often gauges are sampled (DefaultSampleInterval
	// when 0).
	Interval time.Duration
	Log      *slog.Logger
}

// Sampler feeds the operations charts: every second it adds the
// submissions accepted since its last flush to the cluster-wide counts
// (eventrate.TaskSubmitted), and every Interval it observes the running
// pool's utilisation and the payment checks' lateness. Every gateway
// replica runs one; a minute keeps the peak of all their samples.
type Sampler struct {
	o    SamplerOptions
	sent int64
}

// NewSampler returns a Sampler.
func NewSampler(o SamplerOptions) *Sampler {
	if o.Interval <= 0 {
		o.Interval = DefaultSampleInterval
	}
	return &Sampler{o: o}
}

// Run samples until ctx ends, then flushes the last submissions.
func (s *Sampler) Run(ctx context.Context) {
	flush := time.NewTicker(time.Second)
	defer flush.Stop()
	sample := time.NewTicker(s.o.Interval)
	defer sample.Stop()
	s.Sample(ctx)
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			s.Flush(fctx)
			cancel()
			return
		case <-flush.C:
			s.Flush(ctx)
		case <-sample.C:
			s.Sample(ctx)
		}
	}
}

// Flush adds the submissions accepted since the last flush to the
// cluster-wide counts. Those it could not add are added by the next.
func (s *Sampler) Flush(ctx context.Context) {
	if s.o.Accepted == nil {
		return
	}
	n := s.o.Accepted()
	if n == s.sent {
		return
	}
	if err := s.o.Events.Add(ctx, eventrate.TaskSubmitted, n-s.sent); err != nil {
		s.o.Log.WarnContext(ctx, "operations: submissions not counted", "err", err)
		return
	}
	s.sent = n
}

// Sample observes the running pool's utilisation and the payment
// checks' lateness once. A figure that cannot be read is left out (a gap
// in its chart).
func (s *Sampler) Sample(ctx context.Context) {
	values := map[string]float64{}
	if s.o.Pool != nil {
		snap, err := s.o.Pool.Snapshot(ctx)
		switch {
		case err != nil:
			s.o.Log.WarnContext(ctx, "operations: slot pool not sampled", "err", err)
		case snap.Capacity > 0:
			values[GaugeSlotUtilisation] = float64(len(snap.Holders)) / float64(snap.Capacity)
		}
	}
	if s.o.Reconciler != nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := s.o.Reconciler.GetStats(rctx, &reconcilerv1.GetStatsRequest{})
		cancel()
		if err != nil {
			s.o.Log.WarnContext(ctx, "operations: check lateness not sampled", "err", err)
		} else {
			values[GaugeCheckLateness] = r.GetStats().GetMaxLateness().AsDuration().Seconds()
		}
	}
	if err := s.o.Events.Observe(ctx, values); err != nil {
		s.o.Log.WarnContext(ctx, "operations: samples not recorded", "err", err)
	}
}
