package wechatpay

import (
	"crypto/sha256"
	"encoding/hex"
)

// OutTradeNo is the out_trade_no orderflow places a member's order code
// under: 32 hex digits of SHA-256(member, NUL, order code). Order codes
// are the shop's and only unique per member, while the provider needs an
// out_trade_no unique per merchant; deriving it from both means two
// members' equal codes are two orders, so no member can learn that
// another used a code, nor take a code away from them. The same member and
// code always give the same number, so placing an order again is
// idempotent.
func OutTradeNo(member, orderCode string) string {
	h := sha256.Sum256([]byte(member + "\x00" + orderCode))
	return hex.EncodeToString(h[:16])
}
