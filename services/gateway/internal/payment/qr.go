package payment

import (
	"bytes"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"net/http"

	"github.com/boombuler/barcode"
	"github.com/boombuler/barcode/qr"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
)

// QRSize is the width and height in pixels of a payment's QR code image.
const QRSize = 256

// quietZone is the white border around a QR code, in modules, that the
// standard asks for (ISO/IEC 18004): readers find the code's finder
// patterns by it.
const quietZone = 4

// QRCode encodes a payment link (code_url) as a QR code PNG of QRSize
// pixels, error correction level M: every module the same whole number of
// pixels, centred in a white border of at least quietZone modules.
func QRCode(codeURL string) ([]byte, error) {
	code, err := qr.Encode(codeURL, qr.M, qr.Auto)
	if err != nil {
		return nil, fmt.Errorf("encode QR code: %w", err)
	}
	// barcode.Scale draws whole-pixel modules; the border around them is
	// ours.
	n := code.Bounds().Dx()
	px := QRSize / (n + 2*quietZone)
	if px < 1 {
		return nil, fmt.Errorf("encode QR code: %d modules do not fit %d pixels", n, QRSize)
	}
	scaled, err := barcode.Scale(code, n*px, n*px)
	if err != nil {
		return nil, fmt.Errorf("scale QR code: %w", err)
	}
	img := image.NewGray(image.Rect(0, 0, QRSize, QRSize))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	off := (QRSize - n*px) / 2
	draw.Draw(img, image.Rect(off, off, off+n*px, off+n*px), scaled, scaled.Bounds().Min, draw.Src)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("encode PNG: %w", err)
	}
	return buf.Bytes(), nil
}

// QRHandler serves GET /v1/payments/{orderCode}/qr: the caller's payment's
// code_url as a QR code PNG for the shopper to scan. It authenticates and
// looks the payment up exactly like GetPayment (the bearer token in
// Authorization), so another member's order code answers 404 like one
// that does not exist; errors are google.rpc.Status JSON.
func (s *Server) QRHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := metadata.NewIncomingContext(r.Context(), metadata.Pairs("authorization", r.Header.Get("Authorization")))
		resp, err := s.GetPayment(ctx, &gatewayv1.GetPaymentRequest{OrderCode: r.PathValue("orderCode")})
		if err != nil {
			writeStatus(w, err)
			return
		}
		img, err := QRCode(resp.GetPayment().GetCodeUrl())
		if err != nil {
			s.log.ErrorContext(ctx, "payment QR code", "order_code", r.PathValue("orderCode"), "err", err)
			http.Error(w, "cannot render the QR code", http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "image/png")
		h.Set("Cache-Control", "private, no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(img)
	})
}

// writeStatus answers err as grpc-gateway does: the HTTP status of its
// code and the google.rpc.Status as JSON.
func writeStatus(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	body, merr := protojson.Marshal(st.Proto())
	if merr != nil {
		body = []byte(`{"code":13,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
	_, _ = w.Write(body)
}
