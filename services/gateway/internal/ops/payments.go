package ops

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
)

// GetPayment returns a payment, its member and pending check (another member's: NOT_FOUND).
func (s *Server) GetPayment(ctx context.Context, req *opsv1.GetPaymentRequest) (*opsv1.GetPaymentResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	if m := req.GetMemberId(); m != "" && !auth.ValidMemberID(m) {
		return nil, apierr.Field("memberId", "must be a member id")
	}
	if err := orderCode(req.GetOrderCode()); err != nil {
		return nil, err
	}
	r, err := s.o.Reconciler.InspectPayment(ctx, &reconcilerv1.InspectPaymentRequest{OrderCode: req.GetOrderCode()})
	if err != nil {
		return nil, s.reconcilerErr(ctx, err)
	}
	if m := req.GetMemberId(); m != "" && r.GetMemberId() != m {
		return nil, apierr.New(codes.NotFound, apierr.ReasonPaymentNotFound, "payment does not exist")
	}
	return &opsv1.GetPaymentResponse{Payment: r.GetPayment(), MemberId: r.GetMemberId(), Check: r.GetCheck()}, nil
}

// ListStuckPayments pages through the payments whose reconciliation is stuck, oldest first.
func (s *Server) ListStuckPayments(ctx context.Context, req *opsv1.ListStuckPaymentsRequest) (*opsv1.ListStuckPaymentsResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 20, 100)
	if err != nil {
		return nil, err
	}
	if _, err := offsetToken(req.GetPageToken()); err != nil {
		return nil, err
	}
	r, err := s.o.Reconciler.ListStuckPayments(ctx, &reconcilerv1.ListStuckPaymentsRequest{PageSize: int32(size), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, s.reconcilerErr(ctx, err)
	}
	return &opsv1.ListStuckPaymentsResponse{Payments: r.GetPayments(), NextPageToken: r.GetNextPageToken(), Total: r.GetTotal()}, nil
}

// maxReschedule is how far ahead an operator may move a check.
const maxReschedule = 7 * 24 * time.Hour

// RunPaymentCheck runs an UNPAID payment's due check now.
func (s *Server) RunPaymentCheck(ctx context.Context, req *opsv1.RunPaymentCheckRequest) (*opsv1.RunPaymentCheckResponse, error) {
	r, err := s.reschedule(ctx, "RunPaymentCheck", req, req.GetOrderCode(), nil, true)
	if err != nil {
		return nil, err
	}
	return &opsv1.RunPaymentCheckResponse{MemberId: r.GetMemberId(), Payment: r.GetPayment(), Check: r.GetCheck()}, nil
}

// ReschedulePaymentCheck moves an UNPAID payment's next check.
func (s *Server) ReschedulePaymentCheck(ctx context.Context, req *opsv1.ReschedulePaymentCheckRequest) (*opsv1.ReschedulePaymentCheckResponse, error) {
	r, err := s.reschedule(ctx, "ReschedulePaymentCheck", req, req.GetOrderCode(), req.GetCheckTime(), false)
	if err != nil {
		return nil, err
	}
	return &opsv1.ReschedulePaymentCheckResponse{MemberId: r.GetMemberId(), Payment: r.GetPayment(), Check: r.GetCheck()}, nil
}

// reschedule is the audited mutation of RunPaymentCheck (runNow: the
// check runs now) and ReschedulePaymentCheck (at, required).
func (s *Server) reschedule(ctx context.Context, action string, req proto.Message, code string, at *timestamppb.Timestamp, runNow bool) (*reconcilerv1.RescheduleCheckResponse, error) {
	var out *reconcilerv1.RescheduleCheckResponse
	valid := func() error {
		if err := orderCode(code); err != nil {
			return err
		}
		if runNow {
			return nil
		}
		now := s.o.Clock.Now()
		switch {
		case at == nil:
			return apierr.Field("checkTime", "is required")
		case !at.IsValid():
			return apierr.Field("checkTime", "must be a timestamp such as \"2030-01-02T15:04:05Z\"")
		case at.AsTime().Before(now.Add(-time.Minute)):
			return apierr.Field("checkTime", "must not be in the past (run the check now instead)")
		case at.AsTime().After(now.Add(maxReschedule)):
			return apierr.Field("checkTime", "must be at most 7 days ahead")
		}
		return nil
	}
	err := s.mutate(ctx, action, "payment "+code, req, valid, func(ctx context.Context) error {
		var err error
		out, err = s.o.Reconciler.RescheduleCheck(ctx, &reconcilerv1.RescheduleCheckRequest{OrderCode: code, CheckTime: at})
		if err != nil {
			return s.reconcilerErr(ctx, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CancelPaymentTracking stops reconciling a member's unpaid payment.
func (s *Server) CancelPaymentTracking(ctx context.Context, req *opsv1.CancelPaymentTrackingRequest) (*opsv1.CancelPaymentTrackingResponse, error) {
	out := &opsv1.CancelPaymentTrackingResponse{}
	valid := func() error { return payRef(req.GetMemberId(), req.GetOrderCode()) }
	err := s.mutate(ctx, "CancelPaymentTracking", req.GetMemberId()+"/"+req.GetOrderCode(), req, valid, func(ctx context.Context) error {
		r, err := s.o.Reconciler.CancelTracking(ctx, &reconcilerv1.CancelTrackingRequest{MemberId: req.GetMemberId(), OrderCode: req.GetOrderCode()})
		if err != nil {
			return s.reconcilerErr(ctx, err)
		}
		out.Payment = r.GetPayment()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func payRef(member, code string) error {
	if !auth.ValidMemberID(member) {
		return apierr.Field("memberId", "must be a member id")
	}
	return orderCode(code)
}

func orderCode(code string) error {
	if code == "" || len(code) > 32 {
		return apierr.Field("orderCode", "must be 1 to 32 characters")
	}
	return nil
}

// reconcilerErr passes the reconciler's answers through, except that a
// failure to reach it becomes UNAVAILABLE.
func (s *Server) reconcilerErr(ctx context.Context, err error) error {
	switch status.Code(err) {
	case codes.NotFound, codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists:
		return err
	}
	s.o.Log.WarnContext(ctx, "operations: reconciler call failed", "err", err)
	return apierr.New(codes.Unavailable, apierr.ReasonUpstream, "the payment reconciler is unavailable, please retry later")
}
