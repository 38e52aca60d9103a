// Package payment implements the gateway's PaymentService: it validates a
// member's payment requests and forwards them to the payment reconciler
// over gRPC with the service-to-service token.
package payment

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/rules"
)

// Authenticator resolves the calling member.
type Authenticator interface {
	Member(ctx context.Context) (string, error)
}

// Server serves PaymentService.
type Server struct {
	gatewayv1.UnimplementedPaymentServiceServer
	rc    reconcilerv1.ReconcilerServiceClient
	authn Authenticator
	log   *slog.Logger
}

var _ gatewayv1.PaymentServiceServer = (*Server)(nil)

// New returns a Server calling the reconciler through rc, whose connection
// must carry the service token (see ServiceToken).
func New(rc reconcilerv1.ReconcilerServiceClient, authn Authenticator, log *slog.Logger) *Server {
	return &Server{rc: rc, authn: authn, log: log}
}

// CreatePayment validates the order and has the reconciler place it.
func (s *Server) CreatePayment(ctx context.Context, req *gatewayv1.CreatePaymentRequest) (*gatewayv1.CreatePaymentResponse, error) {
	member, err := s.authn.Member(ctx)
	if err != nil {
		return nil, err
	}
	if err := validate(req); err != nil {
		return nil, err
	}
	resp, err := s.rc.CreatePayment(ctx, &reconcilerv1.CreatePaymentRequest{
		MemberId: member, OrderCode: req.GetOrderCode(), AmountFen: req.GetAmountFen(), Description: req.GetDescription(),
	})
	if err != nil {
		return nil, s.upstream(ctx, err)
	}
	return &gatewayv1.CreatePaymentResponse{Payment: resp.GetPayment()}, nil
}

// GetPayment returns one of the caller's payments.
func (s *Server) GetPayment(ctx context.Context, req *gatewayv1.GetPaymentRequest) (*gatewayv1.GetPaymentResponse, error) {
	member, err := s.authn.Member(ctx)
	if err != nil {
		return nil, err
	}
	if err := rules.Payment.OrderCode.CheckText(req.GetOrderCode()); err != nil {
		return nil, err
	}
	resp, err := s.rc.GetPayment(ctx, &reconcilerv1.GetPaymentRequest{MemberId: member, OrderCode: req.GetOrderCode()})
	if err != nil {
		return nil, s.upstream(ctx, err)
	}
	return &gatewayv1.GetPaymentResponse{Payment: resp.GetPayment()}, nil
}

// upstream passes the reconciler's answers for the caller through and
// hides the rest (auth failures between services, transport errors, whose
// messages name internal addresses) behind UNAVAILABLE. An UNAVAILABLE
// the reconciler answered itself carries a reason.
func (s *Server) upstream(ctx context.Context, err error) error {
	st, ok := status.FromError(err)
	if ok {
		switch st.Code() {
		case codes.NotFound, codes.AlreadyExists, codes.InvalidArgument, codes.FailedPrecondition:
			return err
		case codes.Unavailable:
			if apierr.Reason(err) != "" {
				return err
			}
		case codes.Canceled, codes.DeadlineExceeded:
			return apierr.New(st.Code(), apierr.ReasonUpstream, "payment service did not answer in time")
		}
	}
	s.log.ErrorContext(ctx, "reconciler call failed", "err", err)
	return apierr.New(codes.Unavailable, apierr.ReasonUpstream, "payment service unavailable, please retry")
}

// validate checks a payment request against the payment rules.
func validate(req *gatewayv1.CreatePaymentRequest) error {
	r := &rules.Payment
	if err := r.OrderCode.CheckText(req.GetOrderCode()); err != nil {
		return err
	}
	if err := r.AmountFen.CheckInt(req.GetAmountFen()); err != nil {
		return err
	}
	return r.Description.CheckText(req.GetDescription())
}

// ServiceToken returns per-call credentials presenting the
// service-to-service token ("authorization: Bearer <token>") for
// grpc.WithPerRPCCredentials. They are allowed over plaintext connections,
// as the reconciler is reached inside the cluster network.
func ServiceToken(token string) credentials.PerRPCCredentials {
	return serviceToken(token)
}

type serviceToken string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t serviceToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (serviceToken) RequireTransportSecurity() bool { return false }
