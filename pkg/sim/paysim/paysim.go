// Package paysim simulates the payment provider (WeChat Pay API v3, native
// payments) for the demo, the tests and the benchmarks: it verifies the
// merchant's request signatures, keeps orders in memory, answers queries
// as the provider documents (an order it never saw is 404
// ORDER_NOT_EXIST, one not yet paid is NOTPAY without payer_total),
// closes unpaid orders (refusing paid ones with 400 ORDERPAID, young ones
// with ORDER_CLOSE_TOO_EARLY and unknown ones with 404 ORDER_NOT_EXIST),
// pays orders on an admin call and then sends the
// signed, encrypted notification, and injects per-order faults (errors,
// latency, payment after a delay, never paying, tampered answers). It
// counts what tests assert on (GET /stats).
//
// Every answer of the provider API (/v3/...) is signed like the real
// provider's: Wechatpay-Signature, -Timestamp, -Nonce and -Serial. In the
// platform-certificate mode the serial is the platform certificate's and
// GET /v3/certificates hands the key out; in the WeChat Pay public-key mode
// (Options.PublicKeyID set) the serial is that PUB_KEY_ID_… id, the key is
// handed out only by GET /admin/public-key (standing in for the merchant
// platform's download page) and GET /v3/certificates answers 404.
package paysim

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
)

// Options configure a Sim.
type Options struct {
	// MchID and AppID are the only merchant the simulator serves.
	MchID string
	AppID string
	// APIv3Key encrypts notifications and certificates (32 bytes).
	APIv3Key []byte
	// PlatformKey signs notifications; PlatformSerial names it (derived
	// from the key when empty).
	PlatformKey    *rsa.PrivateKey
	PlatformSerial string
	// PublicKeyID, when set (PUB_KEY_ID_…), switches the simulator to the
	// WeChat Pay public-key mode: PlatformKey signs under this id and no
	// platform certificate is served.
	PublicKeyID string
	// MerchantPub verifies the merchant's request signatures.
	MerchantPub *rsa.PublicKey
	// NotifyURL receives notifications; empty uses each order's
	// notify_url.
	NotifyURL string
	// MinCloseAge is the youngest order that may be closed.
	MinCloseAge time.Duration
	// SignatureWindow bounds the age of a request's timestamp (5 min when
	// zero).
	SignatureWindow time.Duration
	// Clock tells the time (the wall clock when nil).
	Clock clock.Clock
	// HTTPClient sends notifications (10 s timeout when nil).
	HTTPClient *http.Client
	// Logger logs notification failures (discarded when nil).
	Logger *slog.Logger
	// Registerer receives the simulator's metrics (none when nil).
	Registerer prometheus.Registerer
}

// Stats are the simulator's counters.
type Stats struct {
	Creates int64 `json:"creates"`
	Queries int64 `json:"queries"`
	// Closes counts close calls that closed an order (or found it closed).
	Closes int64 `json:"closes"`
	// CloseAttempts counts every close call that passed authentication.
	CloseAttempts int64 `json:"closeAttempts"`
	// ClosedAfterPaid counts closes that succeeded on a paid order. The
	// simulator refuses them, so it stays 0; it is kept as the invariant
	// tests and dashboards assert.
	ClosedAfterPaid int64 `json:"closedAfterPaid"`
	// CloseRefusedPaid counts closes refused with ORDERPAID.
	CloseRefusedPaid int64 `json:"closeRefusedPaid"`
	// CloseRefusedTooEarly counts closes of orders younger than the
	// minimum close age.
	CloseRefusedTooEarly int64 `json:"closeRefusedTooEarly"`
	// Payments counts orders that became SUCCESS.
	Payments int64 `json:"payments"`
	// PayRefusedClosed counts admin payments refused because the order was
	// already closed.
	PayRefusedClosed int64 `json:"payRefusedClosed"`
	// Notifies counts notifications sent; NotifyFailures those the merchant
	// did not acknowledge with a 2xx.
	Notifies       int64 `json:"notifies"`
	NotifyFailures int64 `json:"notifyFailures"`
	// InjectedErrors counts answers replaced by a configured fault.
	InjectedErrors int64 `json:"injectedErrors"`
	// BadSignatures counts requests refused for their signature.
	BadSignatures int64 `json:"badSignatures"`
	// TamperedAnswers counts query answers tampered with on purpose
	// (Behaviour.Tamper).
	TamperedAnswers int64 `json:"tamperedAnswers"`
}

// Fault makes the next Count calls answer an error.
type Fault struct {
	// Code is the error code (SYSTEM_ERROR, FREQUENCY_LIMITED, ...).
	Code string `json:"code"`
	// Status is the HTTP status (500 when zero).
	Status int `json:"status,omitempty"`
	// Count is how many calls fail.
	Count int `json:"count"`
	// Applied performs the call before answering the error (a close that
	// happened although the merchant was told it failed).
	Applied bool `json:"applied,omitempty"`
}

// Behaviour is an order's configured behaviour. It may be set before the
// order is created.
type Behaviour struct {
	// PayAfter makes the order SUCCESS once it is this old (without a
	// notification: a lost callback). Zero disables it.
	PayAfter Duration `json:"payAfter,omitempty"`
	// NeverPay refuses admin payments of the order.
	NeverPay bool `json:"neverPay,omitempty"`
	// QueryFault and CloseFault inject errors into queries and closes.
	QueryFault Fault `json:"queryFault"`
	CloseFault Fault `json:"closeFault"`
	// Latency delays every answer about the order.
	Latency Duration `json:"latency,omitempty"`
	// Tamper makes every query answer about the order claim SUCCESS in a
	// way the merchant must refuse: one of the Tamper… kinds.
	Tamper string `json:"tamper,omitempty"`
	// TamperClose makes every close answer about the order carry a
	// signature the merchant must refuse (TamperSignature or
	// TamperSerial); the close itself is applied as usual.
	TamperClose string `json:"tamperClose,omitempty"`
}

// Kinds of tampered query answers (Behaviour.Tamper). Each claims the
// order is paid.
const (
	// TamperBody changes the body after it was signed.
	TamperBody = "body"
	// TamperSerial signs correctly but names another key's serial.
	TamperSerial = "serial"
	// TamperSignature sends a signature that does not verify.
	TamperSignature = "signature"
	// TamperMchID, TamperAppID, TamperAmount and TamperOutTradeNo sign an
	// answer about another merchant, app, amount or order.
	TamperMchID      = "mchid"
	TamperAppID      = "appid"
	TamperAmount     = "amount"
	TamperOutTradeNo = "out_trade_no"
)

// TamperCloseKinds lists the kinds Behaviour.TamperClose takes.
var TamperCloseKinds = []string{TamperSerial, TamperSignature}

// TamperKinds lists every Tamper… kind.
var TamperKinds = []string{TamperBody, TamperSerial, TamperSignature, TamperMchID, TamperAppID, TamperAmount, TamperOutTradeNo}

// Duration is a time.Duration that reads and writes JSON as "1m30s".
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "1m30s" or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("duration: %w", err)
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Order is the simulator's view of one order.
type Order struct {
	OutTradeNo     string    `json:"outTradeNo"`
	Description    string    `json:"description"`
	AmountFen      int64     `json:"amountFen"`
	NotifyURL      string    `json:"notifyUrl"`
	TradeState     string    `json:"tradeState"`
	TransactionID  string    `json:"transactionId,omitempty"`
	CreateTime     time.Time `json:"createTime"`
	PaidTime       time.Time `json:"paidTime,omitzero"`
	ClosedTime     time.Time `json:"closedTime,omitzero"`
	NotificationID string    `json:"notificationId"`
	// TraceParent is the W3C trace context the order was placed with; the
	// notification carries it (see Notify).
	TraceParent string `json:"traceParent,omitempty"`
	// Queries and Closes count the merchant's calls about this order
	// (including those for an order not created yet).
	Queries int `json:"queries"`
	Closes  int `json:"closes"`
	Creates int `json:"creates"`
	// Known reports whether the order was created.
	Known bool `json:"known"`
}

// Sim is the simulated provider.
type Sim struct {
	opts    Options
	metrics *prometheus.CounterVec

	mu         sync.Mutex
	orders     map[string]*Order
	behaviours map[string]*Behaviour
	stats      Stats
	txSeq      int64
	journal    io.Writer
}

// New returns a simulator.
func New(opts Options) *Sim {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SignatureWindow == 0 {
		opts.SignatureWindow = 5 * time.Minute
	}
	if opts.PlatformSerial == "" {
		opts.PlatformSerial = wechatpay.KeySerial(&opts.PlatformKey.PublicKey)
	}
	s := &Sim{
		opts:       opts,
		orders:     make(map[string]*Order),
		behaviours: make(map[string]*Behaviour),
		metrics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderflow_paysim_requests_total",
			Help: "Requests to the simulated payment provider by endpoint and outcome.",
		}, []string{"endpoint", "outcome"}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.metrics)
	}
	return s
}

// PlatformSerial is the serial of the platform certificate.
func (s *Sim) PlatformSerial() string { return s.opts.PlatformSerial }

// SigningSerial is the Wechatpay-Serial of the simulator's answers and
// notifications: the public key id in the public-key mode, else the
// platform certificate's serial.
func (s *Sim) SigningSerial() string {
	if s.opts.PublicKeyID != "" {
		return s.opts.PublicKeyID
	}
	return s.opts.PlatformSerial
}

// PublicKey is the key the simulator signs with (the WeChat Pay public key
// in the public-key mode).
func (s *Sim) PublicKey() *rsa.PublicKey { return &s.opts.PlatformKey.PublicKey }

// Stats returns the counters.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Order returns the simulator's record of an order (including the calls
// made about it), and whether it has any.
func (s *Sim) Order(code string) (Order, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[code]
	if !ok {
		return Order{}, false
	}
	return *o, true
}

// Orders returns every order the simulator has a record of.
func (s *Sim) Orders() []Order {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Order, 0, len(s.orders))
	for _, o := range s.orders {
		out = append(out, *o)
	}
	return out
}

// SetBehaviour sets an order's behaviour (before or after it is created).
func (s *Sim) SetBehaviour(code string, b Behaviour) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behaviours[code] = &b
}

// ErrNeverPay means the order is configured never to be paid.
var ErrNeverPay = errors.New("paysim: order is configured never to be paid")

// ErrOrderClosed means the order is closed and cannot be paid.
var ErrOrderClosed = errors.New("paysim: order is closed")

// ErrUnknownOrder means the order was never created.
var ErrUnknownOrder = errors.New("paysim: unknown order")

// Pay makes the shopper pay an order now (idempotent for a paid order).
// With notify set it then sends the notification and returns the
// merchant's HTTP status.
func (s *Sim) Pay(ctx context.Context, code string, notify bool) (int, error) {
	s.mu.Lock()
	o, ok := s.orders[code]
	switch {
	case !ok || !o.Known:
		s.mu.Unlock()
		return 0, fmt.Errorf("%w %q", ErrUnknownOrder, code)
	case s.behaviour(code).NeverPay:
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: %q", ErrNeverPay, code)
	case o.TradeState == wechatpay.TradeStateClosed:
		s.stats.PayRefusedClosed++
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: %q", ErrOrderClosed, code)
	}
	s.payLocked(o, s.opts.Clock.Now())
	s.mu.Unlock()
	if !notify {
		return 0, nil
	}
	return s.Notify(ctx, code)
}

// Notify sends (or resends, under the same notification id) the payment
// notification of a paid order and returns the merchant's HTTP status.
// The notification carries the traceparent the order was placed with, so
// a trace covers placement → notification (the real provider sends no
// trace context; its callbacks start traces of their own).
func (s *Sim) Notify(ctx context.Context, code string) (int, error) {
	s.mu.Lock()
	o, ok := s.orders[code]
	if !ok || o.TradeState != wechatpay.TradeStateSuccess {
		s.mu.Unlock()
		return 0, fmt.Errorf("paysim: order %q is not paid", code)
	}
	tx, id, url, traceparent := s.transactionLocked(o), o.NotificationID, o.NotifyURL, o.TraceParent
	s.stats.Notifies++
	s.mu.Unlock()
	if s.opts.NotifyURL != "" {
		url = s.opts.NotifyURL
	}
	status, err := s.send(ctx, url, id, traceparent, tx)
	if err != nil || status/100 != 2 {
		s.mu.Lock()
		s.stats.NotifyFailures++
		s.mu.Unlock()
	}
	s.metrics.WithLabelValues("notify", strconv.Itoa(status)).Inc()
	return status, err
}

func (s *Sim) send(ctx context.Context, url, id, traceparent string, tx wechatpay.Transaction) (int, error) {
	n, err := wechatpay.BuildNotification(id, tx, s.opts.PlatformKey, s.SigningSerial(), s.opts.APIv3Key, s.opts.Clock.Now())
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(n.Body))
	if err != nil {
		return 0, fmt.Errorf("paysim: notify %s: %w", tx.OutTradeNo, err)
	}
	for k, v := range n.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := s.opts.HTTPClient.Do(req)
	if err != nil {
		s.opts.Logger.WarnContext(ctx, "notification not delivered", "order_code", tx.OutTradeNo, "err", err)
		return 0, fmt.Errorf("paysim: notify %s: %w", tx.OutTradeNo, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, nil
}

func (s *Sim) behaviour(code string) Behaviour {
	if b, ok := s.behaviours[code]; ok {
		return *b
	}
	return Behaviour{}
}

// record returns the order's record, creating an unknown placeholder that
// counts calls about an order not created (yet).
func (s *Sim) record(code string) *Order {
	o, ok := s.orders[code]
	if !ok {
		o = &Order{OutTradeNo: code, TradeState: wechatpay.TradeStateNotPay}
		s.orders[code] = o
	}
	return o
}

func (s *Sim) payLocked(o *Order, now time.Time) {
	if o.TradeState == wechatpay.TradeStateSuccess {
		return
	}
	s.txSeq++
	o.TradeState = wechatpay.TradeStateSuccess
	o.TransactionID = fmt.Sprintf("42000%015d", s.txSeq)
	o.PaidTime = now
	s.stats.Payments++
	s.persistLocked(o)
}

// settleLocked applies PayAfter.
func (s *Sim) settleLocked(o *Order, now time.Time) {
	b := s.behaviour(o.OutTradeNo)
	if o.Known && o.TradeState == wechatpay.TradeStateNotPay && b.PayAfter > 0 && !b.NeverPay &&
		!now.Before(o.CreateTime.Add(time.Duration(b.PayAfter))) {
		s.payLocked(o, o.CreateTime.Add(time.Duration(b.PayAfter)))
	}
}

func (s *Sim) transactionLocked(o *Order) wechatpay.Transaction {
	tx := wechatpay.Transaction{
		AppID: s.opts.AppID, MchID: s.opts.MchID, OutTradeNo: o.OutTradeNo,
		TradeType: "NATIVE", TradeState: o.TradeState,
		Amount: wechatpay.Amount{Total: o.AmountFen, Currency: "CNY"},
	}
	switch o.TradeState {
	case wechatpay.TradeStateSuccess:
		// Only a paid order carries what the shopper paid.
		tx.Amount.PayerTotal = o.AmountFen
		tx.TransactionID = o.TransactionID
		tx.SuccessTime = o.PaidTime.Format(time.RFC3339)
		tx.TradeStateDesc = "支付成功"
	case wechatpay.TradeStateClosed:
		tx.TradeStateDesc = "订单已关闭"
	default:
		tx.TradeStateDesc = "订单未支付"
	}
	return tx
}

// takeFault consumes one injected fault, reporting it and whether the call
// should still be applied.
func (s *Sim) takeFault(code string, close bool) (*wechatpay.APIError, bool) {
	b, ok := s.behaviours[code]
	if !ok {
		return nil, true
	}
	f := &b.QueryFault
	if close {
		f = &b.CloseFault
	}
	if f.Count <= 0 {
		return nil, true
	}
	f.Count--
	s.stats.InjectedErrors++
	status := f.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	return &wechatpay.APIError{Status: status, Code: f.Code, Message: "injected fault"}, f.Applied
}
