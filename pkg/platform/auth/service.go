package auth

import "crypto/subtle"

// Service identities. Each caller→callee pair of services has a token of
// its own, ORDERFLOW_<CALLER>_<CALLEE>_TOKEN, which only that callee's
// internal listener accepts, and only from the callers on its allow-list
// (Callers). No public listener and no admin port accepts a service token:
// admin is for people. Today the one pair is the gateway calling the
// reconciler's gRPC.

// DevGatewayReconcilerToken is the published development value of
// ORDERFLOW_GATEWAY_RECONCILER_TOKEN: filled in when
// ORDERFLOW_ENV=development leaves it unset, refused in production.
const DevGatewayReconcilerToken = "dev-gateway-reconciler-token"

// Callers is an internal listener's allow-list: each caller's name and
// the token it presents.
type Callers map[string]string

// Identify returns the name of the caller whose token tok is, comparing
// with every entry in constant time; an empty token matches nobody.
func (c Callers) Identify(tok string) (string, bool) {
	var who string
	for name, want := range c {
		if want != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1 {
			who = name
		}
	}
	return who, who != ""
}
