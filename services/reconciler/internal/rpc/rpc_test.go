package rpc_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/grpcserver"
	"github.com/orderflow/orderflow/pkg/platform/metrics"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
	"github.com/orderflow/orderflow/services/reconciler/internal/reconcile"
	"github.com/orderflow/orderflow/services/reconciler/internal/rpc"
)

type noJobs struct{}

func (noJobs) Schedule(context.Context, string, time.Time, []byte) error { return nil }
func (noJobs) Cancel(context.Context, string) (bool, error)              { return false, nil }

func TestAuthAndErrors(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	log := slog.New(slog.DiscardHandler)
	svc := reconcile.New(paystore.New(rdb, prefix, time.Hour), nil, noJobs{}, reconcile.Options{})
	srv, health := grpcserver.New(log, metrics.NewRegistry(), grpcserver.Options{
		Unary:  []grpc.UnaryServerInterceptor{rpc.UnaryAuth("s3cret")},
		Stream: []grpc.StreamServerInterceptor{rpc.StreamAuth("s3cret")},
	})
	reconcilerv1.RegisterReconcilerServiceServer(srv, rpc.New(svc, log, time.Now))
	health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := reconcilerv1.NewReconcilerServiceClient(conn)
	ctx := context.Background()
	withToken := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}

	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health without token = %v, want served", err)
	}
	tests := []struct {
		name       string
		ctx        context.Context
		req        *reconcilerv1.GetPaymentRequest
		wantCode   codes.Code
		wantReason string
	}{
		{"no token", ctx, &reconcilerv1.GetPaymentRequest{MemberId: "m1", OrderCode: "A1"}, codes.Unauthenticated, apierr.ReasonUnauthenticated},
		{"wrong token", withToken("nope"), &reconcilerv1.GetPaymentRequest{MemberId: "m1", OrderCode: "A1"}, codes.Unauthenticated, apierr.ReasonUnauthenticated},
		{"unknown payment", withToken("s3cret"), &reconcilerv1.GetPaymentRequest{MemberId: "m1", OrderCode: "A1"}, codes.NotFound, apierr.ReasonPaymentNotFound},
		{"bad order code", withToken("s3cret"), &reconcilerv1.GetPaymentRequest{MemberId: "m1", OrderCode: "a b"}, codes.InvalidArgument, apierr.ReasonInvalidField},
		{"bad member", withToken("s3cret"), &reconcilerv1.GetPaymentRequest{OrderCode: "A1"}, codes.InvalidArgument, apierr.ReasonInvalidField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.GetPayment(tt.ctx, tt.req)
			if status.Code(err) != tt.wantCode || apierr.Reason(err) != tt.wantReason {
				t.Errorf("GetPayment() = %v (reason %q), want %v %s", err, apierr.Reason(err), tt.wantCode, tt.wantReason)
			}
		})
	}
}
