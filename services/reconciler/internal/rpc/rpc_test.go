package rpc_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
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

// startServer serves the reconciler's gRPC API on a real listener, with
// one caller, "gateway" with the token "s3cret", and returns a client of
// it.
func startServer(t *testing.T) (*grpc.ClientConn, reconcilerv1.ReconcilerServiceClient) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	log := slog.New(slog.DiscardHandler)
	svc := reconcile.New(paystore.New(rdb, prefix, time.Hour), nil, noJobs{}, reconcile.Options{})
	srv, health := grpcserver.New(log, metrics.NewRegistry(), grpcserver.Options{
		Unary:  []grpc.UnaryServerInterceptor{rpc.UnaryAuth(auth.Callers{"gateway": "s3cret"})},
		Stream: []grpc.StreamServerInterceptor{rpc.StreamAuth(auth.Callers{"gateway": "s3cret"})},
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
	return conn, reconcilerv1.NewReconcilerServiceClient(conn)
}

func TestAuthAndErrors(t *testing.T) {
	conn, client := startServer(t)
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

// TestEveryRuleThroughGRPC: each payment rule refused by the real gRPC
// server, naming the field's JSON path (as the gateway passes the error
// on to REST clients).
func TestEveryRuleThroughGRPC(t *testing.T) {
	_, client := startServer(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	create := func(code string, amount int64, desc string) func() error {
		return func() error {
			_, err := client.CreatePayment(ctx, &reconcilerv1.CreatePaymentRequest{MemberId: "m1", OrderCode: code, AmountFen: amount, Description: desc})
			return err
		}
	}
	tests := []struct {
		name      string
		call      func() error
		wantField string
	}{
		{"order code empty", create("", 1, ""), "orderCode"},
		{"order code too long", create(strings.Repeat("P", 33), 1, ""), "orderCode"},
		{"order code bad character", create("P 1", 1, ""), "orderCode"},
		{"amount zero", create("P1", 0, ""), "amountFen"},
		{"amount over", create("P1", 100_000_001, ""), "amountFen"},
		{"description too long", create("P1", 1, strings.Repeat("茶", 128)), "description"},
		{"member missing", func() error {
			_, err := client.CreatePayment(ctx, &reconcilerv1.CreatePaymentRequest{OrderCode: "P1", AmountFen: 1})
			return err
		}, "memberId"},
		{"read: order code bad", func() error {
			_, err := client.GetPayment(ctx, &reconcilerv1.GetPaymentRequest{MemberId: "m1", OrderCode: "P/1"})
			return err
		}, "orderCode"},
		{"cancel: order code too long", func() error {
			_, err := client.CancelTracking(ctx, &reconcilerv1.CancelTrackingRequest{MemberId: "m1", OrderCode: strings.Repeat("P", 33)})
			return err
		}, "orderCode"},
		{"notification: order code empty", func() error {
			_, err := client.ApplyNotification(ctx, &reconcilerv1.ApplyNotificationRequest{})
			return err
		}, "orderCode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var got string
			for _, d := range status.Convert(err).Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					got = ei.GetMetadata()["field"]
				}
			}
			if status.Code(err) != codes.InvalidArgument || got != tt.wantField {
				t.Errorf("= %v (field %q), want INVALID_ARGUMENT naming %s", err, got, tt.wantField)
			}
		})
	}
}
