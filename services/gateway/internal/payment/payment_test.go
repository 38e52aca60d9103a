package payment_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	paymentv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/payment/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/services/gateway/internal/payment"
)

type memberFromCtx struct{}

func (memberFromCtx) Member(ctx context.Context) (string, error) {
	m, ok := auth.MemberFrom(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "no member")
	}
	return m, nil
}

// reconcilerStub records the requests it gets and answers err, if set.
type reconcilerStub struct {
	reconcilerv1.ReconcilerServiceClient
	create *reconcilerv1.CreatePaymentRequest
	get    *reconcilerv1.GetPaymentRequest
	err    error
}

func (r *reconcilerStub) CreatePayment(_ context.Context, in *reconcilerv1.CreatePaymentRequest, _ ...grpc.CallOption) (*reconcilerv1.CreatePaymentResponse, error) {
	r.create = in
	if r.err != nil {
		return nil, r.err
	}
	return &reconcilerv1.CreatePaymentResponse{Payment: &paymentv1.Payment{OrderCode: in.GetOrderCode(), Status: paymentv1.PaymentStatus_PAYMENT_STATUS_UNPAID}}, nil
}

func (r *reconcilerStub) GetPayment(_ context.Context, in *reconcilerv1.GetPaymentRequest, _ ...grpc.CallOption) (*reconcilerv1.GetPaymentResponse, error) {
	r.get = in
	if r.err != nil {
		return nil, r.err
	}
	return &reconcilerv1.GetPaymentResponse{Payment: &paymentv1.Payment{OrderCode: in.GetOrderCode()}}, nil
}

func fieldOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

func TestCreatePaymentValidation(t *testing.T) {
	ctx := auth.WithMember(context.Background(), "alice")
	tests := []struct {
		name      string
		req       *gatewayv1.CreatePaymentRequest
		wantField string
	}{
		{"valid", &gatewayv1.CreatePaymentRequest{OrderCode: "A_1-b", AmountFen: 1, Description: strings.Repeat("茶", 127)}, ""},
		{"max amount", &gatewayv1.CreatePaymentRequest{OrderCode: strings.Repeat("a", 32), AmountFen: 100_000_000}, ""},
		{"empty code", &gatewayv1.CreatePaymentRequest{AmountFen: 1}, "orderCode"},
		{"long code", &gatewayv1.CreatePaymentRequest{OrderCode: strings.Repeat("a", 33), AmountFen: 1}, "orderCode"},
		{"bad char", &gatewayv1.CreatePaymentRequest{OrderCode: "a/b", AmountFen: 1}, "orderCode"},
		{"zero amount", &gatewayv1.CreatePaymentRequest{OrderCode: "A1"}, "amountFen"},
		{"negative amount", &gatewayv1.CreatePaymentRequest{OrderCode: "A1", AmountFen: -5}, "amountFen"},
		{"huge amount", &gatewayv1.CreatePaymentRequest{OrderCode: "A1", AmountFen: 100_000_001}, "amountFen"},
		{"long description", &gatewayv1.CreatePaymentRequest{OrderCode: "A1", AmountFen: 1, Description: strings.Repeat("x", 128)}, "description"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub := &reconcilerStub{}
			s := payment.New(stub, memberFromCtx{}, slog.New(slog.DiscardHandler))
			_, err := s.CreatePayment(ctx, tt.req)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("CreatePayment() = %v, want nil", err)
				}
				if stub.create.GetMemberId() != "alice" || stub.create.GetOrderCode() != tt.req.GetOrderCode() {
					t.Errorf("reconciler got %v, want member alice and order %s", stub.create, tt.req.GetOrderCode())
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || fieldOf(err) != tt.wantField {
				t.Errorf("CreatePayment() = %v (field %q), want INVALID_ARGUMENT naming %s", err, fieldOf(err), tt.wantField)
			}
			if stub.create != nil {
				t.Error("invalid request reached the reconciler")
			}
		})
	}
}

func TestUpstreamErrors(t *testing.T) {
	ctx := auth.WithMember(context.Background(), "alice")
	tests := []struct {
		upstream error
		want     codes.Code
	}{
		{status.Error(codes.NotFound, "payment does not exist"), codes.NotFound},
		{status.Error(codes.AlreadyExists, "taken"), codes.AlreadyExists},
		{status.Error(codes.Unauthenticated, "invalid service token"), codes.Unavailable},
		{status.Error(codes.Internal, "boom"), codes.Unavailable},
		{status.Error(codes.DeadlineExceeded, "slow"), codes.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.upstream.Error(), func(t *testing.T) {
			s := payment.New(&reconcilerStub{err: tt.upstream}, memberFromCtx{}, slog.New(slog.DiscardHandler))
			_, err := s.GetPayment(ctx, &gatewayv1.GetPaymentRequest{OrderCode: "A1"})
			if got := status.Code(err); got != tt.want {
				t.Errorf("GetPayment() code = %v, want %v", got, tt.want)
			}
		})
	}
	s := payment.New(&reconcilerStub{}, memberFromCtx{}, slog.New(slog.DiscardHandler))
	if _, err := s.GetPayment(context.Background(), &gatewayv1.GetPaymentRequest{OrderCode: "A1"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("GetPayment(no member) = %v, want UNAUTHENTICATED", err)
	}
}
