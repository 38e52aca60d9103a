package browser_test

import (
	"strings"
	"testing"

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
