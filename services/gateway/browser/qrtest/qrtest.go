// Package qrtest reads QR codes back in tests, with a decoder independent
// of the encoder the gateway renders them with.
package qrtest

import (
	"bytes"
	"fmt"
	"image/png"
	"testing"

	"github.com/makiuchi-d/gozxing"
	"github.com/makiuchi-d/gozxing/qrcode"
)

// Decode returns the text of the QR code in a PNG, failing t when there is
// none.
func Decode(t testing.TB, data []byte) string {
	t.Helper()
	text, err := Read(data)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// Read returns the text of the QR code in a PNG. It looks for the code as
// a phone's reader does (finder patterns first); gozxing's finder-pattern
// search misses about one in a hundred of the gateway's crisp renders
// (data modules that look like a finder pattern), so a code it does not
// find is read as what the PNG is: a pure, upright code on a white border.
func Read(data []byte) (string, error) {
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("decode PNG: %w", err)
	}
	bmp, err := gozxing.NewBinaryBitmapFromImage(img)
	if err != nil {
		return "", fmt.Errorf("binarise QR image: %w", err)
	}
	res, err := qrcode.NewQRCodeReader().Decode(bmp, nil)
	if err != nil {
		pure := map[gozxing.DecodeHintType]interface{}{gozxing.DecodeHintType_PURE_BARCODE: true}
		if res, err = qrcode.NewQRCodeReader().Decode(bmp, pure); err != nil {
			return "", fmt.Errorf("decode QR code: %w", err)
		}
	}
	return res.GetText(), nil
}
