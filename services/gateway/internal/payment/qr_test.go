package payment_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	paymentv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/payment/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/rules"
	"github.com/orderflow/orderflow/services/gateway/internal/payment"
)

// bearerMember takes the member from "Authorization: Bearer <member>" in
// the incoming metadata, as the real authenticator does from a token.
type bearerMember struct{}

func (bearerMember) Member(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 && strings.HasPrefix(v[0], "Bearer ") && len(v[0]) > len("Bearer ") {
		return strings.TrimPrefix(v[0], "Bearer "), nil
	}
	return "", status.Error(codes.Unauthenticated, "missing bearer token")
}

// ownedPayments answers GetPayment for member-a's PAY-1 only.
type ownedPayments struct {
	reconcilerv1.ReconcilerServiceClient
}

func (ownedPayments) GetPayment(_ context.Context, in *reconcilerv1.GetPaymentRequest, _ ...grpc.CallOption) (*reconcilerv1.GetPaymentResponse, error) {
	if in.GetMemberId() != "member-a" || in.GetOrderCode() != "PAY-1" {
		return nil, status.Error(codes.NotFound, "payment does not exist")
	}
	return &reconcilerv1.GetPaymentResponse{Payment: &paymentv1.Payment{
		OrderCode: "PAY-1", CodeUrl: "weixin://wxpay/bizpayurl?pr=PAY-1", Status: paymentv1.PaymentStatus_PAYMENT_STATUS_UNPAID,
	}}, nil
}

func TestQRHandler(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/payments/{orderCode}/qr", payment.New(ownedPayments{}, bearerMember{}, slog.New(slog.DiscardHandler)).QRHandler())
	get := func(code, bearer string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/v1/payments/"+code+"/qr", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	rec := get("PAY-1", "member-a")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "image/png" {
		t.Fatalf("own payment: %d %s, want 200 image/png", rec.Code, rec.Header().Get("Content-Type"))
	}
	// The image is the payment's code_url encoded (the encoder is
	// deterministic; the browser module decodes its images as a phone does).
	want, err := payment.QRCode("weixin://wxpay/bizpayurl?pr=PAY-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rec.Body.Bytes(), want) {
		t.Errorf("QR image of the payment = %d bytes, want the payment's code_url encoded (%d bytes)", rec.Body.Len(), len(want))
	}
	for _, tt := range []struct {
		name, code, bearer string
		want               int
	}{
		{"no token", "PAY-1", "", http.StatusUnauthorized},
		{"another member's payment", "PAY-1", "member-b", http.StatusNotFound},
		{"unknown payment", "PAY-2", "member-a", http.StatusNotFound},
		{"invalid order code", strings.Repeat("x", int(rules.Payment.OrderCode.Max)+1), "member-a", http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := get(tt.code, tt.bearer)
			if rec.Code != tt.want || !strings.Contains(rec.Header().Get("Content-Type"), "json") {
				t.Errorf("GET = %d %s, want %d with a JSON status", rec.Code, rec.Header().Get("Content-Type"), tt.want)
			}
		})
	}
}
