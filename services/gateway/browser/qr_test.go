package browser_test

import (
	"bytes"
	"image/png"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/services/gateway/browser/qrtest"
	"github.com/orderflow/orderflow/services/gateway/internal/payment"
)

// TestQRCodeDecodesToTheLink decodes the payment's QR image as a phone
// would (it lives here, beside the page tests, so the decoder stays out of
// the gateway module).
func TestQRCodeDecodesToTheLink(t *testing.T) {
	for _, link := range []string{
		"weixin://wxpay/bizpayurl?pr=PAY-1",
		"weixin://wxpay/bizpayurl?pr=" + strings.Repeat("x", 120),
	} {
		data, err := payment.QRCode(link)
		if err != nil {
			t.Fatal(err)
		}
		if got := qrtest.Decode(t, data); got != link {
			t.Errorf("decode(QRCode(%q)) = %q", link, got)
		}
	}
}

// TestQRCodeHasTheStandardQuietZone: the code sits in a white border of at
// least 4 modules (ISO/IEC 18004), which readers need to find it on a page
// of any colour. The top-left finder pattern's first row is a run of 7
// dark modules: its length gives the module size in pixels.
func TestQRCodeHasTheStandardQuietZone(t *testing.T) {
	data, err := payment.QRCode("weixin://wxpay/bizpayurl?pr=" + wechatpay.OutTradeNo("member-a", "ORD-1"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	dark := func(x, y int) bool { r, _, _, _ := img.At(x, y).RGBA(); return r < 0x8000 }
	b := img.Bounds()
	top, left := -1, -1
	for y := b.Min.Y; y < b.Max.Y && top < 0; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if dark(x, y) {
				top, left = y, x
				break
			}
		}
	}
	if top < 0 {
		t.Fatal("the image has no dark pixel")
	}
	run := 0
	for x := left; x < b.Max.X && dark(x, top); x++ {
		run++
	}
	module := run / 7
	if module < 1 {
		t.Fatalf("finder pattern row of %d pixels", run)
	}
	if top-b.Min.Y < 4*module || left-b.Min.X < 4*module {
		t.Errorf("quiet zone of %d×%d pixels, want at least 4 modules (%d pixels)", left-b.Min.X, top-b.Min.Y, 4*module)
	}
}
