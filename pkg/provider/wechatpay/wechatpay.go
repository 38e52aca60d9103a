// Package wechatpay speaks the WeChat Pay API v3 wire format: the merchant's
// client for native orders (create, query, close), request signing with the
// merchant's RSA key, the provider's signed and AES-256-GCM encrypted
// payment notifications, and the signing side used by the simulator.
//
// Every answer of the provider is signed (Wechatpay-Signature over
// "timestamp\nnonce\nbody\n", Wechatpay-Timestamp within 5 minutes,
// Wechatpay-Serial naming the key). The client verifies each answer,
// success or error, against the key its serial names in the configured
// KeySource and refuses one that does not verify; a query answer must also
// name this merchant's mchid and appid and the order asked about. A refused
// answer is uncertain (IsUncertain), never a definite one.
//
// The provider signs with one of two kinds of key. In the WeChat Pay
// public-key mode (merchants enrolled since 2024) the key is downloaded
// once from the merchant platform and configured as a file with its id,
// PUB_KEY_ID_…; such merchants cannot call GET /v3/certificates. In the
// platform-certificate mode the keys are read from a PEM file or fetched
// from GET /v3/certificates, whose entries are encrypted with the APIv3 key
// (so only the real provider, who shares that key, can hand one out).
// Unlike the real provider, the simulator's entries hold a PEM public key
// rather than an X.509 certificate; ParsePublicKey accepts both.
package wechatpay

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/tracehttp"
)

// Trade states reported by the provider.
const (
	TradeStateSuccess    = "SUCCESS"
	TradeStateNotPay     = "NOTPAY"
	TradeStateClosed     = "CLOSED"
	TradeStateRefund     = "REFUND"
	TradeStateUserPaying = "USERPAYING"
	TradeStatePayError   = "PAYERROR"
	TradeStateRevoked    = "REVOKED"
)

// Error codes the provider answers with.
const (
	CodeOrderPaid        = "ORDERPAID"
	CodeOrderClosed      = "ORDER_CLOSED"
	CodeOrderNotExist    = "ORDER_NOT_EXIST"
	CodeSystemError      = "SYSTEM_ERROR"
	CodeFrequencyLimited = "FREQUENCY_LIMITED"
	CodeBankError        = "BANKERROR"
	CodeParamError       = "PARAM_ERROR"
	CodeInvalidRequest   = "INVALID_REQUEST"
	CodeSignError        = "SIGN_ERROR"
	CodeNotFound         = "NOT_FOUND"
	// CodeCloseTooEarly is the simulator's answer to closing an order
	// younger than its minimum close age (the real provider asks merchants
	// to wait 5 minutes after creating an order before closing it).
	CodeCloseTooEarly = "ORDER_CLOSE_TOO_EARLY"
	// CodeTimeout and CodeNetwork name uncertain outcomes that never
	// reached an answer (used in attempt records, never sent by the
	// provider).
	CodeTimeout = "TIMEOUT"
	CodeNetwork = "NETWORK_ERROR"
	// CodeBadResponseSignature names an answer refused because its
	// signature, timestamp or serial did not verify; CodeResponseMismatch
	// one that verified but is about another merchant, app or order (used
	// in attempt records, never sent by the provider).
	CodeBadResponseSignature = "RESPONSE_SIGNATURE_INVALID"
	CodeResponseMismatch     = "RESPONSE_MISMATCH"
)

// ErrResponseMismatch means a verified answer names another merchant, app,
// order or amount than the one asked about.
var ErrResponseMismatch = errors.New("wechatpay: answer does not match the request")

// ResponseWindow bounds the distance of an answer's Wechatpay-Timestamp
// from the client's clock.
const ResponseWindow = 5 * time.Minute

// Amount is a transaction's amount in fen. The provider sends PayerTotal
// (what the shopper paid) only for a paid order.
type Amount struct {
	Total      int64  `json:"total"`
	PayerTotal int64  `json:"payer_total,omitempty"`
	Currency   string `json:"currency,omitempty"`
}

// Transaction is the provider's view of an order.
type Transaction struct {
	AppID          string `json:"appid,omitempty"`
	MchID          string `json:"mchid,omitempty"`
	OutTradeNo     string `json:"out_trade_no"`
	TransactionID  string `json:"transaction_id,omitempty"`
	TradeType      string `json:"trade_type,omitempty"`
	TradeState     string `json:"trade_state"`
	TradeStateDesc string `json:"trade_state_desc,omitempty"`
	SuccessTime    string `json:"success_time,omitempty"`
	Amount         Amount `json:"amount"`
}

// PaidAt parses SuccessTime (RFC 3339); zero when unset or malformed.
func (t Transaction) PaidAt() time.Time {
	ts, err := time.Parse(time.RFC3339, t.SuccessTime)
	if err != nil {
		return time.Time{}
	}
	return ts
}

// APIError is an error answer of the provider: its HTTP status and the
// {code, message} body.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error implements error.
func (e *APIError) Error() string {
	return fmt.Sprintf("wechatpay: %d %s: %s", e.Status, e.Code, e.Message)
}

// IsCode reports whether err is an APIError with the given code.
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// IsUncertain reports whether err leaves the outcome of a call unknown: a
// timeout, a network error, an unreadable, unverified or mismatched
// answer, a 5xx, SYSTEM_ERROR, FREQUENCY_LIMITED or BANKERROR. Such a call may or may not have taken
// effect and must be retried, never read as a definite answer. Only a 4xx
// APIError with another code is definite.
func IsUncertain(err error) bool {
	if err == nil {
		return false
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return true
	}
	if ae.Status >= 500 {
		return true
	}
	switch ae.Code {
	case CodeSystemError, CodeFrequencyLimited, CodeBankError:
		return true
	}
	return false
}

// ErrorCode names err for attempt records: the APIError code, TIMEOUT or
// NETWORK_ERROR.
func ErrorCode(err error) string {
	var ae *APIError
	switch {
	case errors.As(err, &ae):
		if ae.Code == "" {
			return fmt.Sprintf("HTTP_%d", ae.Status)
		}
		return ae.Code
	case errors.Is(err, ErrBadSignature), errors.Is(err, ErrUnknownSerial):
		return CodeBadResponseSignature
	case errors.Is(err, ErrResponseMismatch):
		return CodeResponseMismatch
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	default:
		var ue *url.Error
		if errors.As(err, &ue) && ue.Timeout() {
			return CodeTimeout
		}
		return CodeNetwork
	}
}

// NativeOrder is a native (QR code) payment to place.
type NativeOrder struct {
	OutTradeNo  string
	Description string
	AmountFen   int64
	NotifyURL   string
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// BaseURL is the provider's address ("https://api.mch.weixin.qq.com").
	BaseURL string
	// MchID and AppID identify the merchant.
	MchID string
	AppID string
	// Key signs requests; SerialNo names its certificate.
	Key      *rsa.PrivateKey
	SerialNo string
	// APIv3Key decrypts the platform certificates.
	APIv3Key []byte
	// Keys verifies the provider's answers by Wechatpay-Serial: StaticKeys
	// with the WeChat Pay public key under its PUB_KEY_ID_… id, or
	// platform certificates. Nil fetches the platform certificates from
	// the provider (GET /v3/certificates) through this client.
	Keys KeySource
	// HTTPClient defaults to NewHTTPClient(10 * time.Second).
	HTTPClient *http.Client
	// Clock stamps requests; the wall clock when nil.
	Clock clock.Clock
}

// NewHTTPClient returns an HTTP client for the provider: the given timeout
// per call and enough idle connections kept for many concurrent calls
// (the default transport keeps 2 per host, so busy callers would keep
// reconnecting).
func NewHTTPClient(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 128
	return &http.Client{Timeout: timeout, Transport: tracehttp.Transport(t, spanName)}
}

// spanName names a call's client span by method and route, e.g.
// "GET /v3/pay/transactions/out-trade-no/{out_trade_no}".
func spanName(r *http.Request) string { return r.Method + " " + route(r.URL.Path) }

// outTradeNoPath starts the paths of the calls about one order.
const outTradeNoPath = "/v3/pay/transactions/out-trade-no/"

// route returns the route of a request path of the provider's API: the
// path with its out_trade_no replaced by a placeholder.
func route(path string) string {
	i := strings.Index(path, outTradeNoPath)
	if i < 0 {
		return path
	}
	r := path[:i+len(outTradeNoPath)] + "{out_trade_no}"
	if strings.HasSuffix(path, "/close") {
		r += "/close"
	}
	return r
}

// Client is the merchant's API v3 client.
type Client struct {
	opts ClientOptions
}

// NewClient returns a Client.
func NewClient(opts ClientOptions) *Client {
	if opts.HTTPClient == nil {
		opts.HTTPClient = NewHTTPClient(10 * time.Second)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.SerialNo == "" && opts.Key != nil {
		opts.SerialNo = KeySerial(&opts.Key.PublicKey)
	}
	opts.BaseURL = strings.TrimRight(opts.BaseURL, "/")
	c := &Client{opts: opts}
	if c.opts.Keys == nil {
		c.opts.Keys = NewPlatformKeys(c.PlatformKeys, c.opts.Clock)
	}
	return c
}

// Keys returns the source of the provider's keys the client verifies
// answers with (notifications are verified with the same keys).
func (c *Client) Keys() KeySource { return c.opts.Keys }

// NativeRequest is the JSON body of POST /v3/pay/transactions/native.
type NativeRequest struct {
	AppID       string `json:"appid"`
	MchID       string `json:"mchid"`
	Description string `json:"description"`
	OutTradeNo  string `json:"out_trade_no"`
	NotifyURL   string `json:"notify_url"`
	Amount      Amount `json:"amount"`
}

// CreateNative places a native order and returns its code_url (the payment
// link shown as a QR code). Placing the same order again answers the same
// link.
func (c *Client) CreateNative(ctx context.Context, o NativeOrder) (string, error) {
	req := NativeRequest{
		AppID: c.opts.AppID, MchID: c.opts.MchID, Description: o.Description,
		OutTradeNo: o.OutTradeNo, NotifyURL: o.NotifyURL,
		Amount: Amount{Total: o.AmountFen, Currency: "CNY"},
	}
	var resp struct {
		CodeURL string `json:"code_url"`
	}
	if err := c.do(ctx, http.MethodPost, "/v3/pay/transactions/native", req, &resp); err != nil {
		return "", fmt.Errorf("create native order %s: %w", o.OutTradeNo, err)
	}
	return resp.CodeURL, nil
}

// Query returns the provider's view of an order. An order the provider
// has no record of answers an APIError 404 ORDER_NOT_EXIST. An answer that names
// another mchid, appid or out_trade_no is refused with
// ErrResponseMismatch (the caller compares the amount with its own
// record).
func (c *Client) Query(ctx context.Context, outTradeNo string) (Transaction, error) {
	var tx Transaction
	p := outTradeNoPath + url.PathEscape(outTradeNo) + "?mchid=" + url.QueryEscape(c.opts.MchID)
	if err := c.do(ctx, http.MethodGet, p, nil, &tx); err != nil {
		return Transaction{}, fmt.Errorf("query order %s: %w", outTradeNo, err)
	}
	switch {
	case tx.MchID != c.opts.MchID:
		return Transaction{}, fmt.Errorf("query order %s: %w: mchid %q", outTradeNo, ErrResponseMismatch, tx.MchID)
	case tx.AppID != c.opts.AppID:
		return Transaction{}, fmt.Errorf("query order %s: %w: appid %q", outTradeNo, ErrResponseMismatch, tx.AppID)
	case tx.OutTradeNo != outTradeNo:
		return Transaction{}, fmt.Errorf("query order %s: %w: out_trade_no %q", outTradeNo, ErrResponseMismatch, tx.OutTradeNo)
	}
	return tx, nil
}

// Close closes an unpaid order. A paid order answers an APIError with code
// ORDERPAID.
func (c *Client) Close(ctx context.Context, outTradeNo string) error {
	p := outTradeNoPath + url.PathEscape(outTradeNo) + "/close"
	if err := c.do(ctx, http.MethodPost, p, map[string]string{"mchid": c.opts.MchID}, nil); err != nil {
		return fmt.Errorf("close order %s: %w", outTradeNo, err)
	}
	return nil
}

// CertificateList is the body of GET /v3/certificates.
type CertificateList struct {
	Data []Certificate `json:"data"`
}

// Certificate is one platform certificate, encrypted with the APIv3 key.
type Certificate struct {
	SerialNo           string   `json:"serial_no"`
	EffectiveTime      string   `json:"effective_time"`
	ExpireTime         string   `json:"expire_time"`
	EncryptCertificate Resource `json:"encrypt_certificate"`
}

// PlatformKeys fetches the provider's platform public keys by serial
// number. The answer is verified with the key it hands out under the
// serial it is signed with (the entries themselves are authenticated by
// the APIv3 key).
func (c *Client) PlatformKeys(ctx context.Context) (map[string]*rsa.PublicKey, error) {
	status, header, data, err := c.send(ctx, http.MethodGet, "/v3/certificates", nil)
	if err != nil {
		return nil, fmt.Errorf("fetch platform certificates: %w", err)
	}
	var list CertificateList
	if status >= 300 {
		// No key to verify it with yet; it yields no key either way.
		return nil, fmt.Errorf("fetch platform certificates: %w", apiError(status, data))
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("fetch platform certificates: decode response: %w", err)
	}
	keys := make(map[string]*rsa.PublicKey, len(list.Data))
	for _, cert := range list.Data {
		pemBytes, err := Decrypt(c.opts.APIv3Key, cert.EncryptCertificate)
		if err != nil {
			return nil, fmt.Errorf("platform certificate %s: %w", cert.SerialNo, err)
		}
		pub, err := ParsePublicKey(pemBytes)
		if err != nil {
			return nil, fmt.Errorf("platform certificate %s: %w", cert.SerialNo, err)
		}
		keys[cert.SerialNo] = pub
	}
	if len(keys) == 0 {
		return nil, errors.New("fetch platform certificates: none returned")
	}
	if err := c.verify(ctx, header, data, StaticKeys(keys)); err != nil {
		return nil, fmt.Errorf("fetch platform certificates: %w", err)
	}
	return keys, nil
}

// do sends a request, verifies the answer's signature and decodes a 2xx
// answer into out (an error answer becomes an *APIError).
func (c *Client) do(ctx context.Context, method, pathAndQuery string, in, out any) error {
	status, header, data, err := c.send(ctx, method, pathAndQuery, in)
	if err != nil {
		return err
	}
	if err := c.verify(ctx, header, data, nil); err != nil {
		if status >= 500 {
			// Uncertain either way; keep the status for the records.
			return apiError(status, data)
		}
		return err
	}
	if status >= 300 {
		return apiError(status, data)
	}
	if out == nil || status == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}

// verify checks an answer's Wechatpay-* signature with the key its
// Wechatpay-Serial names in keys (the client's key source when nil).
func (c *Client) verify(ctx context.Context, header http.Header, body []byte, keys KeySource) error {
	if keys == nil {
		keys = c.opts.Keys
	}
	serial := header.Get(HeaderSerial)
	if serial == "" {
		return fmt.Errorf("verify response: %w: no %s", ErrBadSignature, HeaderSerial)
	}
	pub, err := keys.Key(ctx, serial)
	switch {
	case errors.Is(err, ErrUnknownSerial):
		return fmt.Errorf("verify response: %w", err)
	case err != nil:
		// Keep an error answer of the key fetch out of the chain: it says
		// nothing about this call.
		return fmt.Errorf("verify response: %w %q: provider keys unavailable: %v", ErrUnknownSerial, serial, err)
	}
	if err := VerifySignature(header, body, pub, c.opts.Clock.Now(), ResponseWindow); err != nil {
		return fmt.Errorf("verify response (serial %s): %w", serial, err)
	}
	return nil
}

// send signs and sends a request and reads the answer (at most 1 MiB).
func (c *Client) send(ctx context.Context, method, pathAndQuery string, in any) (int, http.Header, []byte, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, nil, nil, fmt.Errorf("marshal request: %w", err)
		}
	}
	auth, err := SignRequest(c.opts.Key, c.opts.MchID, c.opts.SerialNo, method, pathAndQuery, body, c.opts.Clock.Now())
	if err != nil {
		return 0, nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.opts.BaseURL+pathAndQuery, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read response: %w", err)
	}
	return resp.StatusCode, resp.Header, data, nil
}

// apiError reads an error answer's {code, message}; a body that is not
// that leaves the status alone.
func apiError(status int, data []byte) *APIError {
	ae := &APIError{Status: status}
	_ = json.Unmarshal(data, ae)
	return ae
}
