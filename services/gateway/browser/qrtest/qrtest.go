// Package qrtest reads QR codes back in tests, with a decoder independent
// of the encoder the gateway renders them with.
package qrtest

import (
	"bytes"
	"image/png"
	"testing"

	"github.com/makiuchi-d/gozxing"
	"github.com/makiuchi-d/gozxing/qrcode"
)

// Decode returns the text of the QR code in a PNG, failing t when there is
// none.
func Decode(t testing.TB, data []byte) string {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decode PNG: %v", err)
	}
	bmp, err := gozxing.NewBinaryBitmapFromImage(img)
	if err != nil {
		t.Fatalf("binarise QR image: %v", err)
	}
	res, err := qrcode.NewQRCodeReader().Decode(bmp, nil)
	if err != nil {
		t.Fatalf("decode QR code: %v", err)
	}
	return res.GetText()
}
