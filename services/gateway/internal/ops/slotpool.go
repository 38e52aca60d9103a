package ops

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
)

func poolStats(snap slotpool.Snapshot) *opsv1.SlotPoolStats {
	st := &opsv1.SlotPoolStats{Capacity: int32(snap.Capacity), InUse: int32(len(snap.Holders) + len(snap.Orphaned)), Waiting: int32(len(snap.Pending)), Reclaimed: snap.Reclaimed,
		CapacityOrigin: settingOrigin(snap.Origin.Capacity), FairnessOrigin: settingOrigin(snap.Origin.Fairness), WeightsOrigin: settingOrigin(snap.Origin.Weights)}
	var oldest time.Duration
	for _, g := range snap.Groups {
		oldest = max(oldest, g.OldestWait)
		st.Groups = append(st.Groups, &opsv1.SlotGroupStats{Group: g.Group, Weight: int32(g.Weight), Holding: int32(g.Holding),
			Waiting: int32(g.Waiting), WaitingHigh: int32(g.WaitingHigh), OldestWait: durationpb.New(g.OldestWait)})
	}
	st.OldestWait = durationpb.New(oldest)
	return st
}

func settingOrigin(o *slotpool.Origin) *opsv1.SlotSettingOrigin {
	if o == nil {
		return nil
	}
	return &opsv1.SlotSettingOrigin{Source: string(o.Source), Actor: o.Actor, Time: timestamppb.New(o.Time)}
}

// GetSlotPool returns the running pool's holders, waiters and recently finished jobs.
func (s *Server) GetSlotPool(ctx context.Context, req *opsv1.GetSlotPoolRequest) (*opsv1.GetSlotPoolResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	n := int(req.GetFinishedCount())
	if n < 0 || n > 200 {
		return nil, apierr.Field("finishedCount", "must be between 0 and 200")
	}
	if n == 0 {
		n = 20
	}
	snap, err := s.o.Pool.Snapshot(ctx)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	fin, err := s.o.Pool.Finished(ctx, n)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	out := &opsv1.GetSlotPoolResponse{Stats: poolStats(snap)}
	for _, h := range snap.Holders {
		out.Holders = append(out.Holders, &opsv1.SlotHolder{JobId: h.JobID, Token: h.Token, Group: h.Group, Since: timestamppb.New(h.Since), LeaseUntil: timestamppb.New(h.LeaseUntil), Replica: h.Replica})
	}
	for _, w := range snap.Pending {
		out.Waiters = append(out.Waiters, &opsv1.SlotWaiter{JobId: w.JobID, Group: w.Group, Priority: w.Priority.String(), Since: timestamppb.New(w.Since), Replica: w.Replica})
	}
	for _, f := range fin {
		out.Finished = append(out.Finished, &opsv1.SlotFinished{JobId: f.JobID, Group: f.Group, Outcome: f.Outcome.String(), Detail: f.Detail, Held: durationpb.New(f.Held), Time: timestamppb.New(f.Time)})
	}
	return out, nil
}

// mutatePool is mutate for a change of the running pool: it validates the
// request (valid, may be nil), runs fn and returns the pool's counts after
// it. Pool errors of fn become API errors (storeErr); API errors pass
// through.
func (s *Server) mutatePool(ctx context.Context, action, target string, req proto.Message, valid func() error, fn func(ctx context.Context) error) (*opsv1.SlotPoolStats, error) {
	var stats *opsv1.SlotPoolStats
	err := s.mutate(ctx, action, target, req, valid, func(ctx context.Context) error {
		if err := fn(ctx); err != nil {
			return s.storeErr(ctx, err)
		}
		snap, err := s.o.Pool.Snapshot(ctx)
		if err != nil {
			return s.storeErr(ctx, err)
		}
		stats = poolStats(snap)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return stats, nil
}

// SetSlotCapacity changes N for every replica.
func (s *Server) SetSlotCapacity(ctx context.Context, req *opsv1.SetSlotCapacityRequest) (*opsv1.SetSlotCapacityResponse, error) {
	valid := func() error {
		if req.GetCapacity() < 0 || req.GetCapacity() > 10000 {
			return apierr.Field("capacity", "must be between 0 and 10000")
		}
		return nil
	}
	stats, err := s.mutatePool(ctx, "SetSlotCapacity", "slot-pool", req, valid, func(ctx context.Context) error {
		return s.o.Pool.SetCapacity(ctx, int(req.GetCapacity()))
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.SetSlotCapacityResponse{Stats: stats}, nil
}

// ResetSlotPoolToConfiguration writes the configured N, fairness limits and weights.
func (s *Server) ResetSlotPoolToConfiguration(ctx context.Context, req *opsv1.ResetSlotPoolToConfigurationRequest) (*opsv1.ResetSlotPoolToConfigurationResponse, error) {
	valid := func() error {
		if s.o.PoolConfig == nil {
			return apierr.New(codes.FailedPrecondition, "SLOT_POOL_NOT_CONFIGURED",
				"the gateway is not told the split-workers' configured pool (set ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS on the gateway)")
		}
		return nil
	}
	stats, err := s.mutatePool(ctx, "ResetSlotPoolToConfiguration", "slot-pool", req, valid, func(ctx context.Context) error {
		return s.o.Pool.ResetToConfiguration(ctx, *s.o.PoolConfig)
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.ResetSlotPoolToConfigurationResponse{Stats: stats}, nil
}

// ReleaseSlot frees the slot of a holder known to be dead.
func (s *Server) ReleaseSlot(ctx context.Context, req *opsv1.ReleaseSlotRequest) (*opsv1.ReleaseSlotResponse, error) {
	valid := func() error {
		if req.GetToken() == "" || len(req.GetToken()) > 128 {
			return apierr.Field("token", "must be a holder's token")
		}
		if len(req.GetReason()) > 500 {
			return apierr.Field("reason", "must be at most 500 characters")
		}
		return nil
	}
	stats, err := s.mutatePool(ctx, "ReleaseSlot", "slot "+req.GetToken(), req, valid, func(ctx context.Context) error {
		reason := "released by an operator"
		if req.GetReason() != "" {
			reason += ": " + req.GetReason()
		}
		err := s.o.Pool.Evict(ctx, req.GetToken(), reason)
		if errors.Is(err, slotpool.ErrLost) {
			return apierr.New(codes.NotFound, "SLOT_NOT_HELD", "no holder has this token (released or reclaimed already)")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.ReleaseSlotResponse{Stats: stats}, nil
}
