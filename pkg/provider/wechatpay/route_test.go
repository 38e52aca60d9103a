package wechatpay

import "testing"

func TestRouteNamesTheCallWithoutItsOrder(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/v3/pay/transactions/native", "/v3/pay/transactions/native"},
		{"/v3/pay/transactions/out-trade-no/M1-ORD-1", "/v3/pay/transactions/out-trade-no/{out_trade_no}"},
		{"/v3/pay/transactions/out-trade-no/M1-ORD-1/close", "/v3/pay/transactions/out-trade-no/{out_trade_no}/close"},
		{"/v3/certificates", "/v3/certificates"},
	} {
		if got := route(tc.path); got != tc.want {
			t.Errorf("route(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
