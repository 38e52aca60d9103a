// Package rpc serves the reconciler's gRPC API
// (orderflow.reconciler.v1.ReconcilerService) for internal callers that
// present the service-to-service bearer token.
package rpc

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/delayq"
	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	paymentv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/payment/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/rules"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
	"github.com/orderflow/orderflow/services/reconciler/internal/reconcile"
)

// Error reasons (ErrorInfo.reason) specific to payments.
const (
	ReasonOrderCodeTaken = "ORDER_CODE_TAKEN"
	// ReasonOrderCodeAmbiguous: an operator gave an order code that
	// several members use, without the member.
	ReasonOrderCodeAmbiguous = "ORDER_CODE_AMBIGUOUS"
	ReasonProviderRejected   = "PAYMENT_PROVIDER_REJECTED"
	ReasonPaidAfterClose     = "PAYMENT_PAID_AFTER_CLOSE"
	ReasonPaymentFinished    = "PAYMENT_FINISHED"
	ReasonPaymentUntracked   = "PAYMENT_UNTRACKED"
)

// Server implements ReconcilerService on a reconcile.Service.
type Server struct {
	reconcilerv1.UnimplementedReconcilerServiceServer
	svc *reconcile.Service
	log *slog.Logger
	now func() time.Time
}

var _ reconcilerv1.ReconcilerServiceServer = (*Server)(nil)

// New returns a Server; now is the time reschedules are checked against
// (the time the check queue compares due times with).
func New(svc *reconcile.Service, log *slog.Logger, now func() time.Time) *Server {
	return &Server{svc: svc, log: log, now: now}
}

// CreatePayment places an order and schedules its reconciliation.
func (s *Server) CreatePayment(ctx context.Context, req *reconcilerv1.CreatePaymentRequest) (*reconcilerv1.CreatePaymentResponse, error) {
	if err := validMember(req.GetMemberId()); err != nil {
		return nil, err
	}
	if err := validateOrder(req.GetOrderCode(), req.GetAmountFen(), req.GetDescription()); err != nil {
		return nil, err
	}
	p, err := s.svc.Create(ctx, req.GetMemberId(), req.GetOrderCode(), req.GetAmountFen(), req.GetDescription())
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &reconcilerv1.CreatePaymentResponse{Payment: ToProto(p)}, nil
}

// GetPayment returns a member's payment.
func (s *Server) GetPayment(ctx context.Context, req *reconcilerv1.GetPaymentRequest) (*reconcilerv1.GetPaymentResponse, error) {
	if err := validMember(req.GetMemberId()); err != nil {
		return nil, err
	}
	if err := validOrderCode(req.GetOrderCode()); err != nil {
		return nil, err
	}
	p, err := s.svc.Get(ctx, req.GetMemberId(), req.GetOrderCode())
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &reconcilerv1.GetPaymentResponse{Payment: ToProto(p)}, nil
}

// CancelTracking stops reconciling a member's unpaid payment.
func (s *Server) CancelTracking(ctx context.Context, req *reconcilerv1.CancelTrackingRequest) (*reconcilerv1.CancelTrackingResponse, error) {
	if err := validMember(req.GetMemberId()); err != nil {
		return nil, err
	}
	if err := validOrderCode(req.GetOrderCode()); err != nil {
		return nil, err
	}
	p, err := s.svc.CancelTracking(ctx, req.GetMemberId(), req.GetOrderCode())
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &reconcilerv1.CancelTrackingResponse{Payment: ToProto(p)}, nil
}

// ApplyNotification applies a verified provider notification.
func (s *Server) ApplyNotification(ctx context.Context, req *reconcilerv1.ApplyNotificationRequest) (*reconcilerv1.ApplyNotificationResponse, error) {
	if err := validOrderCode(req.GetOrderCode()); err != nil {
		return nil, err
	}
	n := reconcile.Notification{
		OutTradeNo: req.GetOrderCode(), TransactionID: req.GetTransactionId(), TradeState: req.GetTradeState(),
		AmountFen: req.GetAmountFen(),
	}
	if req.GetSuccessTime() != nil {
		n.SuccessTime = req.GetSuccessTime().AsTime()
	}
	p, err := s.svc.ApplyNotification(ctx, n)
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &reconcilerv1.ApplyNotificationResponse{Payment: ToProto(p)}, nil
}

// GetStats returns the check queue's and the payments' counts.
func (s *Server) GetStats(ctx context.Context, _ *reconcilerv1.GetStatsRequest) (*reconcilerv1.GetStatsResponse, error) {
	st, err := s.svc.Stats(ctx)
	if err != nil {
		return nil, s.status(ctx, err)
	}
	q := st.Queue
	out := &paymentv1.ReconcileStats{
		Pending: q.Pending, NextDueTime: ts(q.NextDue), Overdue: q.Overdue, OverdueCapped: q.OverdueCapped,
		MaxLateness: durationpb.New(q.MaxLateness), InFlight: q.InFlight, UnpaidTracked: q.Pending + q.InFlight,
		PaidToday: st.PaidToday, ClosedToday: st.ClosedToday, Stuck: st.Stuck, Time: ts(q.Now),
	}
	for _, w := range st.Answers {
		out.Answers = append(out.Answers, &paymentv1.ProviderAnswerStats{
			StartTime: ts(w.Start), EndTime: ts(w.End),
			Answers: w.Counts[eventrate.ProviderAnswer], Uncertain: w.Counts[eventrate.ProviderUncertain],
		})
	}
	return &reconcilerv1.GetStatsResponse{Stats: out}, nil
}

// InspectPayment returns any member's payment with its check.
func (s *Server) InspectPayment(ctx context.Context, req *reconcilerv1.InspectPaymentRequest) (*reconcilerv1.InspectPaymentResponse, error) {
	if err := validOrderCode(req.GetOrderCode()); err != nil {
		return nil, err
	}
	p, js, err := s.svc.Inspect(ctx, req.GetOrderCode())
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &reconcilerv1.InspectPaymentResponse{MemberId: p.Member, Payment: ToProto(p), Check: CheckProto(p, js)}, nil
}

// ListStuckPayments pages through the stuck payments, oldest first.
func (s *Server) ListStuckPayments(ctx context.Context, req *reconcilerv1.ListStuckPaymentsRequest) (*reconcilerv1.ListStuckPaymentsResponse, error) {
	size := int(req.GetPageSize())
	if size < 0 || size > 100 {
		return nil, apierr.Field("page_size", "must be between 0 and 100")
	}
	if size == 0 {
		size = 20
	}
	off := 0
	if tok := req.GetPageToken(); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 {
			return nil, apierr.Field("page_token", "is not a token returned by a previous page")
		}
		off = n
	}
	list, total, err := s.svc.ListStuck(ctx, off, size)
	if err != nil {
		return nil, s.status(ctx, err)
	}
	out := &reconcilerv1.ListStuckPaymentsResponse{Total: total}
	for _, sp := range list {
		out.Payments = append(out.Payments, &paymentv1.StuckPayment{
			MemberId: sp.Payment.Member, Payment: ToProto(sp.Payment), Reason: sp.Reason, Since: ts(sp.Since), Check: CheckProto(sp.Payment, sp.Check),
		})
	}
	if int64(off+size) < total {
		out.NextPageToken = strconv.Itoa(off + size)
	}
	return out, nil
}

// MaxReschedule is how far ahead a check may be moved.
const MaxReschedule = 7 * 24 * time.Hour

// RescheduleCheck moves an UNPAID tracked payment's next check.
func (s *Server) RescheduleCheck(ctx context.Context, req *reconcilerv1.RescheduleCheckRequest) (*reconcilerv1.RescheduleCheckResponse, error) {
	if err := validOrderCode(req.GetOrderCode()); err != nil {
		return nil, err
	}
	now := s.now()
	at := now
	if t := req.GetCheckTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			return nil, apierr.Field("check_time", "must be a valid timestamp")
		}
		if at = t.AsTime(); at.Before(now) {
			at = now
		}
		if at.After(now.Add(MaxReschedule)) {
			return nil, apierr.Field("check_time", "must be at most 7 days ahead")
		}
	}
	p, js, err := s.svc.RescheduleCheck(ctx, req.GetOrderCode(), at)
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &reconcilerv1.RescheduleCheckResponse{MemberId: p.Member, Payment: ToProto(p), Check: CheckProto(p, js)}, nil
}

// CheckProto describes a payment's check.
func CheckProto(p paystore.Payment, js delayq.JobState) *paymentv1.Check {
	return &paymentv1.Check{
		Scheduled: js.Scheduled, DueTime: ts(js.Due), Running: js.Running, LeaseUntil: ts(js.LeaseUntil),
		Attempt: int32(js.Attempt), Step: int32(p.Slot), UncertainRetries: int32(p.Retries),
	}
}

// status maps the service's errors to gRPC status errors.
func (s *Server) status(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, reconcile.ErrNotUnpaid):
		return apierr.New(codes.FailedPrecondition, ReasonPaymentFinished, "the payment is PAID or CLOSED already; its reconciliation is over")
	case errors.Is(err, reconcile.ErrUntracked):
		return apierr.New(codes.FailedPrecondition, ReasonPaymentUntracked, "the payment's reconciliation was cancelled")
	case errors.Is(err, reconcile.ErrNotFound):
		return apierr.New(codes.NotFound, apierr.ReasonPaymentNotFound, "payment does not exist")
	case errors.Is(err, reconcile.ErrAmbiguous):
		return apierr.New(codes.FailedPrecondition, ReasonOrderCodeAmbiguous, "several members have a payment with this order code; look it up by member")
	case errors.Is(err, reconcile.ErrOrderCodeTaken):
		return apierr.New(codes.AlreadyExists, ReasonOrderCodeTaken, "the order code already has a different payment")
	case errors.Is(err, reconcile.ErrAmountMismatch):
		return apierr.Field(rules.Payment.AmountFen.Field, "does not match the amount the order was placed with")
	case errors.Is(err, reconcile.ErrProviderRejected):
		s.log.WarnContext(ctx, "provider rejected the order", "err", err)
		return apierr.New(codes.FailedPrecondition, ReasonProviderRejected, "the payment provider rejected the order")
	case errors.Is(err, reconcile.ErrProviderUnavailable):
		s.log.WarnContext(ctx, "provider unavailable", "err", err)
		return apierr.New(codes.Unavailable, apierr.ReasonUpstream, "the payment provider is unavailable, please retry")
	case errors.Is(err, reconcile.ErrPaidAfterClose):
		return apierr.New(codes.FailedPrecondition, ReasonPaidAfterClose, "the payment was closed before the provider reported it paid")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable, "request cancelled or timed out")
	default:
		s.log.ErrorContext(ctx, "payment request failed", "err", err)
		return apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable, "payment store unavailable, please retry")
	}
}

// validateOrder checks an order to be paid against the payment rules
// (pkg/platform/rules). Errors are INVALID_ARGUMENT naming the field.
func validateOrder(code string, amountFen int64, description string) error {
	r := &rules.Payment
	if err := r.OrderCode.CheckText(code); err != nil {
		return err
	}
	if err := r.AmountFen.CheckInt(amountFen); err != nil {
		return err
	}
	return r.Description.CheckText(description)
}

func validOrderCode(code string) error { return rules.Payment.OrderCode.CheckText(code) }

func validMember(m string) error {
	if !auth.ValidMemberID(m) {
		return apierr.Field("memberId", "must be a valid member id")
	}
	return nil
}

// ToProto converts a stored payment.
func ToProto(p paystore.Payment) *paymentv1.Payment {
	out := &paymentv1.Payment{
		OrderCode: p.OrderCode, AmountFen: p.AmountFen, Description: p.Description, CodeUrl: p.CodeURL,
		TransactionId: p.TransactionID, CreateTime: ts(p.CreateTime), NextCheckTime: ts(p.NextCheck),
		PaidTime: ts(p.PaidTime), ClosedTime: ts(p.ClosedTime),
	}
	switch p.Status {
	case paystore.StatusUnpaid:
		out.Status = paymentv1.PaymentStatus_PAYMENT_STATUS_UNPAID
	case paystore.StatusPaid:
		out.Status = paymentv1.PaymentStatus_PAYMENT_STATUS_PAID
	case paystore.StatusClosed:
		out.Status = paymentv1.PaymentStatus_PAYMENT_STATUS_CLOSED
	}
	for _, a := range p.Attempts {
		out.Attempts = append(out.Attempts, &paymentv1.Attempt{Time: ts(a.Time), Action: a.Action, TradeState: a.TradeState})
	}
	return out
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// exempt lists the methods callable without a caller's token.
func exempt(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.")
}

// authorize admits a call that carries the token of a caller on the
// allow-list; members' and admins' JWTs are not on it.
func authorize(ctx context.Context, callers auth.Callers, method string) error {
	if exempt(method) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return apierr.New(codes.Unauthenticated, apierr.ReasonUnauthenticated, "missing service token")
	}
	got, err := auth.FromHeader(vals[0])
	if _, ok := callers.Identify(got); err != nil || !ok {
		return apierr.New(codes.Unauthenticated, apierr.ReasonUnauthenticated, "invalid service token")
	}
	return nil
}

// UnaryAuth requires "authorization: Bearer <token>" with the token of
// one of callers on every call except health checks and reflection.
func UnaryAuth(callers auth.Callers) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := authorize(ctx, callers, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamAuth is UnaryAuth for streams.
func StreamAuth(callers auth.Callers) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := authorize(ss.Context(), callers, info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
}
