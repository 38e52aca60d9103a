package paysim

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/probe"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
)

const maxBody = 64 << 10

// Handler serves the provider API (/v3/...), the admin API (/admin/...),
// GET /stats and the probes (GET /livez, /readyz, /healthz).
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v3/pay/transactions/native", s.signed(s.handleCreate))
	mux.HandleFunc("GET /v3/pay/transactions/out-trade-no/{no}", s.signed(s.handleQuery))
	mux.HandleFunc("POST /v3/pay/transactions/out-trade-no/{no}/close", s.signed(s.handleClose))
	mux.HandleFunc("GET /v3/certificates", s.signed(s.handleCertificates))
	mux.HandleFunc("GET /admin/public-key", s.handleAdminPublicKey)
	mux.HandleFunc("POST /admin/orders/{code}/pay", s.handleAdminPay)
	mux.HandleFunc("POST /admin/orders/{code}/notify", s.handleAdminNotify)
	mux.HandleFunc("PUT /admin/orders/{code}/behaviour", s.handleAdminBehaviour)
	mux.HandleFunc("GET /admin/orders/{code}", s.handleAdminOrder)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) })
	probe.New(nil, nil).Register(mux) // no dependencies: /livez, /readyz, /healthz
	return mux
}

// signedWriter buffers an answer so that it can be signed once complete.
// A handler may ask for the signature to be tampered with.
type signedWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
	// signOver, when set, is signed instead of the body written.
	signOver []byte
	// serial, when set, replaces the signing serial in Wechatpay-Serial.
	serial string
	// corrupt sends a signature that does not verify.
	corrupt bool
}

func (w *signedWriter) Header() http.Header { return w.header }

func (w *signedWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *signedWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// signed runs h and signs its answer with the platform key, as the
// provider signs every answer to the merchant (errors included).
func (s *Sim) signed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &signedWriter{header: http.Header{}}
		h(sw, r)
		sw.WriteHeader(http.StatusOK)
		over := sw.body.Bytes()
		if sw.signOver != nil {
			over = sw.signOver
		}
		sig, err := wechatpay.SignResponse(s.opts.PlatformKey, s.SigningSerial(), over, s.opts.Clock.Now())
		if err != nil {
			writeError(w, http.StatusInternalServerError, wechatpay.CodeSystemError, err.Error())
			return
		}
		if sw.serial != "" {
			sig.Set(wechatpay.HeaderSerial, sw.serial)
		}
		if sw.corrupt {
			raw, _ := base64.StdEncoding.DecodeString(sig.Get(wechatpay.HeaderSignature))
			raw[len(raw)/2] ^= 0x55
			sig.Set(wechatpay.HeaderSignature, base64.StdEncoding.EncodeToString(raw))
		}
		for k, v := range sw.header {
			w.Header()[k] = v
		}
		for k, v := range sig {
			w.Header()[k] = v
		}
		w.WriteHeader(sw.status)
		_, _ = w.Write(sw.body.Bytes())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, wechatpay.APIError{Code: code, Message: msg})
}

// authenticate reads the body and checks the merchant's signature; it
// answers the error itself and returns ok=false on failure.
func (s *Sim) authenticate(w http.ResponseWriter, r *http.Request, endpoint string) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, wechatpay.CodeParamError, "body too large or unreadable")
		return nil, false
	}
	a, err := wechatpay.VerifyRequest(s.opts.MerchantPub, r.Header.Get("Authorization"), r.Method, r.URL.RequestURI(), body, s.opts.Clock.Now(), s.opts.SignatureWindow)
	if err == nil && a.MchID != s.opts.MchID {
		err = fmt.Errorf("unknown mchid %q", a.MchID)
	}
	if err != nil {
		s.mu.Lock()
		s.stats.BadSignatures++
		s.mu.Unlock()
		s.metrics.WithLabelValues(endpoint, "bad_signature").Inc()
		writeError(w, http.StatusUnauthorized, wechatpay.CodeSignError, err.Error())
		return nil, false
	}
	return body, true
}

// delay applies an order's configured latency.
func (s *Sim) delay(ctx context.Context, code string) {
	s.mu.Lock()
	d := time.Duration(s.behaviour(code).Latency)
	s.mu.Unlock()
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (s *Sim) handleCreate(w http.ResponseWriter, r *http.Request) {
	body, ok := s.authenticate(w, r, "create")
	if !ok {
		return
	}
	var req wechatpay.NativeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, wechatpay.CodeParamError, "malformed JSON: "+err.Error())
		return
	}
	switch {
	case req.MchID != s.opts.MchID || req.AppID != s.opts.AppID:
		writeError(w, http.StatusBadRequest, wechatpay.CodeParamError, "appid or mchid does not match the merchant")
		return
	case req.OutTradeNo == "" || len(req.OutTradeNo) > 32 || req.Description == "" || req.Amount.Total <= 0:
		writeError(w, http.StatusBadRequest, wechatpay.CodeParamError, "out_trade_no, description and a positive amount.total are required")
		return
	}
	s.delay(r.Context(), req.OutTradeNo)
	now := s.opts.Clock.Now()
	s.mu.Lock()
	o := s.record(req.OutTradeNo)
	o.Creates++
	s.stats.Creates++
	if o.Known && (o.AmountFen != req.Amount.Total || o.Description != req.Description) {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, wechatpay.CodeInvalidRequest, "out_trade_no already used with other parameters")
		s.metrics.WithLabelValues("create", "conflict").Inc()
		return
	}
	if !o.Known {
		o.Known = true
		o.Description, o.AmountFen, o.NotifyURL, o.CreateTime = req.Description, req.Amount.Total, req.NotifyURL, now
		o.NotificationID = wechatpay.NewNonce()
		o.TraceParent = r.Header.Get("traceparent")
		s.persistLocked(o)
	}
	s.mu.Unlock()
	s.metrics.WithLabelValues("create", "ok").Inc()
	writeJSON(w, http.StatusOK, map[string]string{"code_url": "weixin://wxpay/bizpayurl?pr=" + req.OutTradeNo})
}

func (s *Sim) handleQuery(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authenticate(w, r, "query"); !ok {
		return
	}
	no := r.PathValue("no")
	if r.URL.Query().Get("mchid") != s.opts.MchID {
		writeError(w, http.StatusBadRequest, wechatpay.CodeParamError, "mchid does not match the merchant")
		return
	}
	s.delay(r.Context(), no)
	s.mu.Lock()
	o := s.record(no)
	o.Queries++
	s.stats.Queries++
	if fault, _ := s.takeFault(no, false); fault != nil {
		s.mu.Unlock()
		s.metrics.WithLabelValues("query", "fault").Inc()
		writeJSON(w, fault.Status, fault)
		return
	}
	if !o.Known {
		s.mu.Unlock()
		s.metrics.WithLabelValues("query", wechatpay.CodeOrderNotExist).Inc()
		writeError(w, http.StatusNotFound, wechatpay.CodeOrderNotExist, "order does not exist")
		return
	}
	s.settleLocked(o, s.opts.Clock.Now())
	tx := s.transactionLocked(o)
	tamper := s.behaviour(no).Tamper
	if tamper != "" {
		s.stats.TamperedAnswers++
	}
	s.mu.Unlock()
	if tamper != "" {
		s.metrics.WithLabelValues("query", "tampered").Inc()
		s.writeTampered(w, tx, tamper)
		return
	}
	s.metrics.WithLabelValues("query", tx.TradeState).Inc()
	writeJSON(w, http.StatusOK, tx)
}

// writeTampered answers a query with a SUCCESS the merchant must refuse.
func (s *Sim) writeTampered(w http.ResponseWriter, tx wechatpay.Transaction, kind string) {
	sw, _ := w.(*signedWriter)
	genuine, _ := json.Marshal(tx)
	paid := tx
	paid.TradeState, paid.TradeStateDesc = wechatpay.TradeStateSuccess, "支付成功"
	paid.TransactionID, paid.SuccessTime = "4200000000TAMPERED", s.opts.Clock.Now().Format(time.RFC3339)
	switch kind {
	case TamperBody:
		sw.signOver = append(genuine, '\n') // what the provider signed: the genuine answer
	case TamperSerial:
		sw.serial = "OTHER" + s.SigningSerial()
	case TamperSignature:
		sw.corrupt = true
	case TamperMchID:
		paid.MchID += "9"
	case TamperAppID:
		paid.AppID += "9"
	case TamperAmount:
		paid.Amount.Total++
		paid.Amount.PayerTotal++
	case TamperOutTradeNo:
		paid.OutTradeNo += "9"
	}
	writeJSON(w, http.StatusOK, paid)
}

func (s *Sim) handleClose(w http.ResponseWriter, r *http.Request) {
	body, ok := s.authenticate(w, r, "close")
	if !ok {
		return
	}
	var req struct {
		MchID string `json:"mchid"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.MchID != s.opts.MchID {
		writeError(w, http.StatusBadRequest, wechatpay.CodeParamError, "body must be {\"mchid\": <merchant>}")
		return
	}
	no := r.PathValue("no")
	s.delay(r.Context(), no)
	now := s.opts.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.record(no)
	o.Closes++
	s.stats.CloseAttempts++
	fault, apply := s.takeFault(no, true)
	status, apiErr := s.closeLocked(o, now, apply)
	if sw, ok := w.(*signedWriter); ok {
		switch s.behaviour(no).TamperClose {
		case TamperSerial:
			sw.serial = "OTHER" + s.SigningSerial()
		case TamperSignature:
			sw.corrupt = true
		}
	}
	if fault != nil {
		s.metrics.WithLabelValues("close", "fault").Inc()
		writeJSON(w, fault.Status, fault)
		return
	}
	if apiErr != nil {
		s.metrics.WithLabelValues("close", apiErr.Code).Inc()
		writeJSON(w, apiErr.Status, apiErr)
		return
	}
	s.metrics.WithLabelValues("close", "ok").Inc()
	w.WriteHeader(status)
}

// closeLocked closes o when apply is set and the order may be closed.
func (s *Sim) closeLocked(o *Order, now time.Time, apply bool) (int, *wechatpay.APIError) {
	if !apply {
		return 0, nil
	}
	s.settleLocked(o, now)
	switch {
	case !o.Known:
		return 0, &wechatpay.APIError{Status: http.StatusNotFound, Code: wechatpay.CodeOrderNotExist, Message: "order does not exist"}
	case o.TradeState == wechatpay.TradeStateSuccess:
		s.stats.CloseRefusedPaid++
		return 0, &wechatpay.APIError{Status: http.StatusBadRequest, Code: wechatpay.CodeOrderPaid, Message: "order is paid"}
	case o.TradeState == wechatpay.TradeStateClosed:
		s.stats.Closes++
		return http.StatusNoContent, nil
	case now.Sub(o.CreateTime) < s.opts.MinCloseAge:
		s.stats.CloseRefusedTooEarly++
		return 0, &wechatpay.APIError{Status: http.StatusBadRequest, Code: wechatpay.CodeCloseTooEarly,
			Message: fmt.Sprintf("an order can be closed %s after it was created", s.opts.MinCloseAge)}
	}
	o.TradeState, o.ClosedTime = wechatpay.TradeStateClosed, now
	s.stats.Closes++
	s.persistLocked(o)
	return http.StatusNoContent, nil
}

func (s *Sim) handleCertificates(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authenticate(w, r, "certificates"); !ok {
		return
	}
	if s.opts.PublicKeyID != "" {
		writeError(w, http.StatusNotFound, wechatpay.CodeNotFound,
			"this merchant verifies with the WeChat Pay public key "+s.opts.PublicKeyID+"; no platform certificates")
		return
	}
	res, err := wechatpay.Encrypt(s.opts.APIv3Key, "certificate", wechatpay.MarshalPublicKeyPEM(&s.opts.PlatformKey.PublicKey))
	if err != nil {
		writeError(w, http.StatusInternalServerError, wechatpay.CodeSystemError, err.Error())
		return
	}
	now := s.opts.Clock.Now()
	writeJSON(w, http.StatusOK, wechatpay.CertificateList{Data: []wechatpay.Certificate{{
		SerialNo:           s.opts.PlatformSerial,
		EffectiveTime:      now.Add(-24 * time.Hour).Format(time.RFC3339),
		ExpireTime:         now.Add(5 * 365 * 24 * time.Hour).Format(time.RFC3339),
		EncryptCertificate: res,
	}}})
}

// handleAdminPublicKey hands out the key the simulator signs with and its
// serial (what a merchant downloads from the merchant platform in the
// public-key mode).
func (s *Sim) handleAdminPublicKey(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{
		"serial": s.SigningSerial(), "publicKeyPem": string(wechatpay.MarshalPublicKeyPEM(s.PublicKey())),
	})
}

func (s *Sim) handleAdminPay(w http.ResponseWriter, r *http.Request) {
	notify := r.URL.Query().Get("notify") != "false"
	status, err := s.Pay(r.Context(), r.PathValue("code"), notify)
	s.adminAnswer(w, r.PathValue("code"), status, err)
}

func (s *Sim) handleAdminNotify(w http.ResponseWriter, r *http.Request) {
	status, err := s.Notify(r.Context(), r.PathValue("code"))
	s.adminAnswer(w, r.PathValue("code"), status, err)
}

func (s *Sim) adminAnswer(w http.ResponseWriter, code string, notifyStatus int, err error) {
	switch {
	case errors.Is(err, ErrUnknownOrder):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		return
	case errors.Is(err, ErrNeverPay), errors.Is(err, ErrOrderClosed):
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	o, _ := s.Order(code)
	resp := map[string]any{"order": o, "notifyStatus": notifyStatus}
	if err != nil {
		resp["notifyError"] = err.Error()
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Sim) handleAdminBehaviour(w http.ResponseWriter, r *http.Request) {
	var b Behaviour
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "behaviour: " + err.Error()})
		return
	}
	if b.Tamper != "" && !slices.Contains(TamperKinds, b.Tamper) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("tamper: %q is not one of %v", b.Tamper, TamperKinds)})
		return
	}
	if b.TamperClose != "" && !slices.Contains(TamperCloseKinds, b.TamperClose) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("tamperClose: %q is not one of %v", b.TamperClose, TamperCloseKinds)})
		return
	}
	s.SetBehaviour(r.PathValue("code"), b)
	writeJSON(w, http.StatusOK, b)
}

func (s *Sim) handleAdminOrder(w http.ResponseWriter, r *http.Request) {
	o, ok := s.Order(r.PathValue("code"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no record of order " + strconv.Quote(r.PathValue("code"))})
		return
	}
	writeJSON(w, http.StatusOK, o)
}
