// Package browser holds the gateway's browser tests: they start the whole
// stack (pkg/testkit/stacktest) and drive the shop page and the operations
// page in headless Chromium through chromedp, and read the payment QR
// images back with a decoder of their own (qrtest, gozxing). It is a Go
// module of its own so that chromedp, cdproto and gozxing, which only these
// tests use, stay out of the gateway module's go.mod and out of its image's
// build.
package browser
