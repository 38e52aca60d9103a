package ops

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/engine/inflight"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
)

// Error-rate windows of the overview, in minutes.
var rateWindows = []int{5, 60}

// GetOverview reads the queue counts, tasks in flight by age, dead letters and the running pool.
func (s *Server) GetOverview(ctx context.Context, _ *opsv1.GetOverviewRequest) (*opsv1.GetOverviewResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	out := &opsv1.GetOverviewResponse{
		Queue:           s.queueStats(s.o.Queue.Queue),
		DeadLetterQueue: s.queueStats(s.o.Queue.DLQ),
		Time:            timestamppb.New(s.o.Clock.Now()),
	}
	if s.o.Queue.Overflow != "" {
		out.OverflowQueue = s.queueStats(s.o.Queue.Overflow)
	}
	s.unacknowledged(ctx, map[string]*opsv1.QueueStats{
		inflight.Split: out.Queue, inflight.Overflow: out.OverflowQueue, inflight.Dead: out.DeadLetterQueue,
	})
	if s.o.Events != nil {
		ws, err := s.o.Events.Windows(ctx, rateWindows...)
		if err != nil {
			s.o.Log.WarnContext(ctx, "operations: error rates unavailable", "err", err)
			out.ErrorRatesError = "error rates unavailable: the task store did not answer"
		}
		for _, w := range ws {
			out.ErrorRates = append(out.ErrorRates, errorRates(w))
		}
	}
	counts, oldest, err := s.o.Store.ProcessingByAge(ctx, []time.Duration{0, time.Minute, 5 * time.Minute, 30 * time.Minute})
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	out.Tasks = &opsv1.TaskStats{Processing: counts[0], OlderThan_1M: counts[1], OlderThan_5M: counts[2], OlderThan_30M: counts[3]}
	if !oldest.IsZero() {
		out.Tasks.OldestCreateTime = timestamppb.New(oldest)
	}
	if out.DeadLetters, err = s.o.Store.DeadLetterCount(ctx); err != nil {
		return nil, s.storeErr(ctx, err)
	}
	if s.o.Pool != nil {
		snap, err := s.o.Pool.Snapshot(ctx)
		if err != nil {
			return nil, s.storeErr(ctx, err)
		}
		out.SlotPool = poolStats(snap)
	}
	// The reconciler's counts are shown when it answers; the rest of the
	// overview does not wait for it.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if r, err := s.o.Reconciler.GetStats(rctx, &reconcilerv1.GetStatsRequest{}); err != nil {
		out.PaymentsError = "payment reconciler unreachable: " + status.Convert(err).Message()
	} else {
		out.Payments = r.GetStats()
	}
	return out, nil
}

// GetRates reads the last minutes' event counts (60 by default) and the Samplers' gauge peaks.
func (s *Server) GetRates(ctx context.Context, req *opsv1.GetRatesRequest) (*opsv1.GetRatesResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	minutes := int(req.GetMinutes())
	if minutes < 0 || minutes > 60 {
		return nil, apierr.Field("minutes", "must be between 0 and 60")
	}
	if minutes == 0 {
		minutes = 60
	}
	if s.o.Events == nil {
		return nil, apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable, "rates are not kept by this gateway")
	}
	ser, err := s.o.Events.Series(ctx, minutes)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	submitted, finished := ser.Sum(eventrate.TaskSubmitted), ser.Sum(eventrate.TaskFinished)
	failed, dead := ser.Sum(eventrate.TaskFailed), ser.Sum(eventrate.DeadLettered)
	util, late := ser.Gauge(GaugeSlotUtilisation), ser.Gauge(GaugeCheckLateness)
	out := &opsv1.GetRatesResponse{Time: timestamppb.New(ser.End)}
	for i := range minutes {
		p := &opsv1.RateMinute{
			StartTime: timestamppb.New(ser.Start.Add(time.Duration(i) * time.Minute)),
			Submitted: submitted[i], Finished: finished[i], Failed: failed[i], DeadLettered: dead[i],
		}
		if !math.IsNaN(util[i]) {
			p.SlotUtilisation = proto.Float64(util[i])
		}
		if !math.IsNaN(late[i]) {
			p.CheckLatenessSeconds = proto.Float64(late[i])
		}
		out.Points = append(out.Points, p)
	}
	return out, nil
}

// errorRates converts a window of the split-workers' event counts.
func errorRates(w eventrate.Window) *opsv1.ErrorRates {
	r := &opsv1.ErrorRates{
		StartTime: timestamppb.New(w.Start), EndTime: timestamppb.New(w.End),
		TasksFinished: w.Counts[eventrate.TaskFinished], TasksFailed: w.Sum(eventrate.TaskFailed),
		DeadLettered: w.Counts[eventrate.DeadLettered],
	}
	for _, name := range w.Names(eventrate.TaskFailed) {
		c, err := strconv.ParseInt(strings.TrimPrefix(name, eventrate.TaskFailed), 10, 32)
		if err != nil {
			continue
		}
		r.FailedByCode = append(r.FailedByCode, &opsv1.ErrorCodeCount{ErrorCode: int32(c), Count: w.Counts[name]})
	}
	return r
}

// queueStats declares the queue passively: AMQP reports ready messages
// and consumers (not unacknowledged ones, see unacknowledged).
func (s *Server) queueStats(name string) *opsv1.QueueStats {
	st := &opsv1.QueueStats{Name: name}
	ch, err := s.o.Channels.Channel()
	if err != nil {
		st.Error = "broker unreachable: " + err.Error()
		return st
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.Ready, st.Consumers = int64(q.Messages), int64(q.Consumers)
	return st
}

// unacknowledged fills in each queue's deliveries held unacknowledged by
// the split-worker replicas, from their live reports.
func (s *Server) unacknowledged(ctx context.Context, queues map[string]*opsv1.QueueStats) {
	if s.o.InFlight == nil {
		return
	}
	tot, err := s.o.InFlight.Sum(ctx)
	if err != nil {
		s.o.Log.WarnContext(ctx, "operations: unacknowledged counts unavailable", "err", err)
	}
	for name, st := range queues {
		if st == nil {
			continue
		}
		if err != nil {
			st.UnacknowledgedError = "unacknowledged count unavailable: the task store did not answer"
			continue
		}
		st.Unacknowledged, st.ReportingReplicas = tot.Held[name], int32(tot.Replicas)
	}
}
