//go:build !race

package browser_test

import (
	"fmt"
	"testing"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/services/gateway/browser/qrtest"
	"github.com/orderflow/orderflow/services/gateway/internal/payment"
)

// This file is built without the race detector only: its test decodes in
// one goroutine, where the detector has nothing to find and runs twelve
// times slower (7 s against 92 s for the 1,000 codes). `make test` runs it
// in a build of its own without -race.

// TestQRCodesOfRealLinksAllDecode decodes the QR codes of 1,000 links of
// the payment provider's form (32 hex digits of out_trade_no): every one
// must read back, as a phone must read every shopper's code.
func TestQRCodesOfRealLinksAllDecode(t *testing.T) {
	failed := 0
	for i := range 1000 {
		link := "weixin://wxpay/bizpayurl?pr=" + wechatpay.OutTradeNo("member-a", fmt.Sprintf("SHOP-%d-%x", i, i*7919))
		data, err := payment.QRCode(link)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := qrtest.Read(data); err != nil || got != link {
			failed++
			t.Logf("%s: read %q, %v", link, got, err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of 1000 QR codes did not read back", failed)
	}
}
