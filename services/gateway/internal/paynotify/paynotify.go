// Package paynotify serves POST /v1/payments/notify, the payment provider's
// callback. It reads the raw body (the signature covers its exact bytes),
// verifies the platform's signature and a 5-minute timestamp window,
// decrypts the transaction with the APIv3 key and hands it to the
// reconciler, whose transition to PAID is idempotent: a replayed
// notification changes nothing.
//
// A verified notification must name this merchant's mchid and appid, the
// currency orders are placed in and the event TRANSACTION.SUCCESS, as the
// query path checks its answers. An applied notification id is recorded in
// Redis for 48 h; a replay is answered 204 and not applied again.
//
// Answers: 204 when applied (or already applied); 401 for a missing,
// forged or stale signature; 400 for a malformed notification, another
// merchant, currency or event, or an amount that differs from the placed
// one; 404 for an unknown order; 413 for a
// body over 64 KiB; 503 when the reconciler cannot be reached (the
// provider then retries).
package paynotify

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
)

// MaxBody bounds a notification's body.
const MaxBody = 64 << 10

// ReplayTTL is how long an applied notification id is remembered.
const ReplayTTL = 48 * time.Hour

// KeySource returns the platform key with a given serial
// (*wechatpay.PlatformKeys).
type KeySource interface {
	Key(ctx context.Context, serial string) (*rsa.PublicKey, error)
}

// Applier applies a verified notification (the reconciler's client).
type Applier interface {
	ApplyNotification(ctx context.Context, in *reconcilerv1.ApplyNotificationRequest, opts ...grpc.CallOption) (*reconcilerv1.ApplyNotificationResponse, error)
}

// Options configure the handler.
type Options struct {
	// Keys verifies the platform's signatures.
	Keys KeySource
	// APIv3Key decrypts the resource (32 bytes).
	APIv3Key []byte
	// Reconciler applies the notification.
	Reconciler Applier
	// Window bounds the signature timestamp's distance from now (5 min
	// when zero).
	Window time.Duration
	// Timeout bounds the reconciler call (5 s when zero).
	Timeout time.Duration
	// MchID and AppID are this merchant's: a notification naming others is
	// refused (400).
	MchID, AppID string
	// Currency is the currency orders are placed in (CNY when empty); a
	// notification in another is refused (400).
	Currency string
	// Redis records applied notification ids for ReplayTTL under Prefix,
	// so a replayed notification is answered 204 and not applied again
	// (nil: every delivery is applied; the reconciler is idempotent).
	Redis      redis.UniversalClient
	Prefix     string
	Clock      clock.Clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

type handler struct {
	opts    Options
	answers *prometheus.CounterVec
}

// NewHandler returns the notification handler.
func NewHandler(opts Options) http.Handler {
	if opts.Window <= 0 {
		opts.Window = 5 * time.Minute
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Currency == "" {
		opts.Currency = "CNY"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{opts: opts, answers: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orderflow_gateway_payment_notifications_total",
		Help: "Payment notifications received, by HTTP answer.",
	}, []string{"code"})}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(h.answers)
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.fail(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.fail(w, http.StatusRequestEntityTooLarge, "body over 64 KiB")
			return
		}
		h.fail(w, http.StatusBadRequest, "unreadable body")
		return
	}
	ctx := r.Context()
	key, err := h.opts.Keys.Key(ctx, r.Header.Get(wechatpay.HeaderSerial))
	if err != nil {
		h.opts.Logger.WarnContext(ctx, "notification from an unknown platform key", "serial", r.Header.Get(wechatpay.HeaderSerial), "err", err)
		h.fail(w, http.StatusUnauthorized, "unknown platform certificate serial")
		return
	}
	tx, err := wechatpay.VerifyNotification(r.Header, body, key, h.opts.APIv3Key, h.opts.Clock.Now(), h.opts.Window)
	switch {
	case errors.Is(err, wechatpay.ErrBadSignature):
		h.opts.Logger.WarnContext(ctx, "notification refused", "err", err)
		h.fail(w, http.StatusUnauthorized, "signature verification failed")
		return
	case err != nil:
		h.opts.Logger.WarnContext(ctx, "malformed notification", "err", err)
		h.fail(w, http.StatusBadRequest, "malformed notification")
		return
	}
	var env wechatpay.Notification // verified above, so read as is
	_ = json.Unmarshal(body, &env)
	if msg := h.mismatch(env, tx); msg != "" {
		h.opts.Logger.WarnContext(ctx, "notification for another merchant or event refused", "notification_id", env.ID, "order_code", tx.OutTradeNo, "mismatch", msg)
		h.fail(w, http.StatusBadRequest, msg)
		return
	}
	if h.seen(ctx, env.ID) {
		h.answers.WithLabelValues(strconv.Itoa(http.StatusNoContent)).Inc()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	req := &reconcilerv1.ApplyNotificationRequest{
		OrderCode: tx.OutTradeNo, TransactionId: tx.TransactionID, TradeState: tx.TradeState, AmountFen: tx.Amount.Total,
	}
	if paid := tx.PaidAt(); !paid.IsZero() {
		req.SuccessTime = timestamppb.New(paid)
	}
	cctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	if _, err := h.opts.Reconciler.ApplyNotification(cctx, req); err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument:
			h.opts.Logger.WarnContext(ctx, "notification rejected", "order_code", tx.OutTradeNo, "err", err)
			h.fail(w, http.StatusBadRequest, "amount or order does not match")
		case codes.NotFound:
			h.fail(w, http.StatusNotFound, "unknown order")
		case codes.FailedPrecondition:
			h.opts.Logger.ErrorContext(ctx, "notification conflicts with the payment's state", "order_code", tx.OutTradeNo, "err", err)
			h.fail(w, http.StatusConflict, "payment state conflicts with the notification")
		default:
			h.opts.Logger.ErrorContext(ctx, "apply notification", "order_code", tx.OutTradeNo, "err", err)
			h.fail(w, http.StatusServiceUnavailable, "please retry")
		}
		return
	}
	h.remember(ctx, env.ID)
	h.answers.WithLabelValues(strconv.Itoa(http.StatusNoContent)).Inc()
	w.WriteHeader(http.StatusNoContent)
}

// mismatch compares a verified notification with this merchant's
// configuration, as the query path compares its answers; it returns what
// differs, or "".
func (h *handler) mismatch(env wechatpay.Notification, tx wechatpay.Transaction) string {
	switch {
	case env.EventType != wechatpay.EventTransactionSuccess:
		return "event_type " + strconv.Quote(env.EventType) + " is not " + wechatpay.EventTransactionSuccess
	case h.opts.MchID != "" && tx.MchID != h.opts.MchID:
		return "mchid does not name this merchant"
	case h.opts.AppID != "" && tx.AppID != h.opts.AppID:
		return "appid does not name this merchant"
	case tx.Amount.Currency != h.opts.Currency:
		return "currency " + strconv.Quote(tx.Amount.Currency) + " is not " + h.opts.Currency
	}
	return ""
}

// seen reports whether notification id was already applied. When Redis
// does not answer the notification is applied again (idempotent).
func (h *handler) seen(ctx context.Context, id string) bool {
	if h.opts.Redis == nil || id == "" {
		return false
	}
	n, err := h.opts.Redis.Exists(ctx, SeenKey(h.opts.Prefix, id)).Result()
	if err != nil {
		h.opts.Logger.WarnContext(ctx, "read applied notification ids", "notification_id", id, "err", err)
		return false
	}
	if n > 0 {
		h.opts.Logger.InfoContext(ctx, "replayed notification answered without applying it", "notification_id", id)
	}
	return n > 0
}

// remember records that notification id was applied, for ReplayTTL.
func (h *handler) remember(ctx context.Context, id string) {
	if h.opts.Redis == nil || id == "" {
		return
	}
	if err := h.opts.Redis.SetNX(ctx, SeenKey(h.opts.Prefix, id), h.opts.Clock.Now().Unix(), ReplayTTL).Err(); err != nil {
		h.opts.Logger.WarnContext(ctx, "record applied notification id", "notification_id", id, "err", err)
	}
}

// SeenKey is the Redis key recording that notification id was applied.
func SeenKey(prefix, id string) string { return prefix + ":paynotify:seen:" + id }

// fail answers the provider's error format {"code":"FAIL","message":...}.
func (h *handler) fail(w http.ResponseWriter, status int, msg string) {
	h.answers.WithLabelValues(strconv.Itoa(status)).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": "FAIL", "message": msg})
}
