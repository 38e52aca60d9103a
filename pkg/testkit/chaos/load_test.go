package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// Outcome kinds of one request, as the client saw it.
const (
	kindOK      = "ok"      // 2xx: accepted
	kindError   = "error"   // an HTTP error answer: retried with its request id after the fault
	kindRefused = "refused" // connection refused: nothing was sent
	kindUnknown = "unknown" // sent, but no answer (reset, timeout): may or may not exist
)

// clientTimeout is the load's HTTP timeout; a 503 must come well before it.
const clientTimeout = 10 * time.Second

// retryFor bounds how long, after the load stops, a submission answered
// with an error is sent again with its request id.
const retryFor = 30 * time.Second

// submission is one order-split request.
type submission struct {
	requestID, member string
	body              map[string]any
	sent, done        time.Time
	status            int
	kind, taskID      string
	// The request sent again with the same request id after the fault,
	// when the first answer was an error: how many times, the last
	// answer's kind, and the task id it told.
	retries                int
	retryKind, retryTaskID string
}

// told reports whether the client learnt the id of task id: from the
// first answer, or from sending the request again with its request id.
func (s *submission) told(id string) bool {
	return id != "" && (s.taskID == id || s.retryTaskID == id)
}

// leftBehind reports whether a listed task t of request s (nil: not the
// load's) is one whose client was never told its id although the request
// was sent and answered (an error, even after retrying with its request
// id; or a refused connection, which sent nothing).
func leftBehind(s *submission, t task) bool {
	if s == nil {
		return true
	}
	switch s.kind {
	case kindError:
		return !s.told(t.TaskID)
	case kindRefused:
		return true
	}
	return false
}

// resubmit sends a submission answered with an error again, with the
// same request id, through post (which answers the HTTP status, the
// kind of answer and the task id), as a careful client does: until an
// answer says what became of it (2xx: the task; a 4xx other than 429:
// refused for good) or until deadline, backing off between tries.
func resubmit(s *submission, deadline time.Time, post func() (int, string, string)) {
	backoff := 200 * time.Millisecond
	for {
		status, kind, id := post()
		s.retries++
		s.retryKind = kind
		if kind == kindOK {
			s.retryTaskID = id
			return
		}
		if kind == kindError && status/100 == 4 && status != http.StatusTooManyRequests {
			return
		}
		if time.Now().Add(backoff).After(deadline) {
			return
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}

// retryErrors sends every submission answered with an error again with
// its request id (see resubmit), at most retryFor in all.
func (l *load) retryErrors() {
	l.mu.Lock()
	var failed []*submission
	for _, s := range l.subs {
		if s.kind == kindError {
			failed = append(failed, s)
		}
	}
	l.mu.Unlock()
	deadline := time.Now().Add(retryFor)
	var wg sync.WaitGroup
	for _, s := range failed {
		l.slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-l.slots }()
			resubmit(s, deadline, func() (int, string, string) {
				var out struct {
					TaskID string `json:"taskId"`
				}
				status, kind := l.call(http.MethodPost, "/v1/order-splits", s.member, s.body, &out)
				return status, kind, out.TaskID
			})
		})
	}
	wg.Wait()
}

// payment is one tracked payment: created through the gateway, then paid
// at the provider with or without the callback, or never.
type payment struct {
	code, member string
	sent, done   time.Time
	status       int
	kind         string
	plan         string // "notify", "lost-callback", "never"
	paid         bool   // the provider acknowledged the shopper's payment
}

// load drives a steady, bounded load through the gateway's REST API.
type load struct {
	t       testing.TB
	s       *stacktest.Stack
	http    *http.Client
	tokens  map[string]string
	members []string
	skus    []string
	tag     string

	mu    sync.Mutex
	subs  []*submission
	pays  []*payment
	wg    sync.WaitGroup
	slots chan struct{}
	seq   int
}

func newLoad(t testing.TB, s *stacktest.Stack, tag string) *load {
	l := &load{
		t: t, s: s, tag: tag,
		http:    &http.Client{Timeout: clientTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		tokens:  map[string]string{},
		members: []string{"chaos-a", "chaos-b", "chaos-c", "chaos-d"},
		skus:    []string{"SKU-TEA-500G", "SKU-MUG", "SKU-RICE-10KG", "SKU-OIL-5L", "SKU-GIFT-CARD"},
		slots:   make(chan struct{}, 96),
	}
	for _, m := range l.members {
		l.tokens[m] = s.DevToken(t, m)
	}
	return l
}

// run submits orders at perSec and payments at paysPerSec until ctx ends.
func (l *load) run(ctx context.Context, perSec, paysPerSec int) {
	var wg sync.WaitGroup
	wg.Go(func() { l.every(ctx, time.Second/time.Duration(perSec), l.submit) })
	wg.Go(func() { l.every(ctx, time.Second/time.Duration(paysPerSec), l.pay) })
	wg.Wait()
}

// every starts f every period in its own goroutine (bounded by slots, so
// a stalled stack cannot pile up unbounded requests).
func (l *load) every(ctx context.Context, period time.Duration, f func()) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			select {
			case l.slots <- struct{}{}:
				l.wg.Go(func() { defer func() { <-l.slots }(); f() })
			default: // all slots busy: skip this tick
			}
		}
	}
}

// wait waits for every request (and payment at the provider) in flight.
func (l *load) wait() { l.wg.Wait() }

func (l *load) next() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	return l.seq
}

func (l *load) submit() { l.submitVia(l.http) }

// submitVia submits one order through client (whose timeout may be
// shorter than the load's, like a shopper who gives up).
func (l *load) submitVia(client *http.Client) {
	n := l.next()
	member := l.members[n%len(l.members)]
	items := []map[string]any{}
	for i := range 1 + n%3 {
		items = append(items, map[string]any{
			"itemCode": fmt.Sprintf("i%d", i), "sku": l.skus[(n+i)%len(l.skus)], "quantity": 1,
		})
	}
	sub := &submission{requestID: fmt.Sprintf("%s-r%d", l.tag, n), member: member}
	sub.body = map[string]any{"orderCode": fmt.Sprintf("%s-o%d", l.tag, n), "items": items, "requestId": sub.requestID}
	l.send(client, sub)
}

// again submits the order of orig once more under a request id of its
// own, as a shopper whose order failed does.
func (l *load) again(orig *submission) {
	sub := &submission{requestID: orig.requestID + "-again", member: orig.member, body: maps.Clone(orig.body)}
	sub.body["requestId"] = sub.requestID
	l.send(l.http, sub)
}

// send posts sub through client and records it with the answer.
func (l *load) send(client *http.Client, sub *submission) {
	var out struct { // the REST binding answers the task itself
		TaskID string `json:"taskId"`
	}
	sub.sent = time.Now()
	sub.status, sub.kind = l.callVia(client, http.MethodPost, "/v1/order-splits", sub.member, sub.body, &out)
	sub.done, sub.taskID = time.Now(), out.TaskID
	l.mu.Lock()
	l.subs = append(l.subs, sub)
	l.mu.Unlock()
}

// awaitAccepted waits until a submission sent at or after since has been
// accepted, or for at most limit.
func (l *load) awaitAccepted(since time.Time, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l.mu.Lock()
		ok := slices.ContainsFunc(l.subs, func(s *submission) bool { return s.kind == kindOK && !s.sent.Before(since) })
		l.mu.Unlock()
		if ok {
			return
		}
	}
}

func (l *load) pay() {
	n := l.next()
	p := &payment{code: fmt.Sprintf("%s-p%d", l.tag, n), member: l.members[n%len(l.members)]}
	p.plan = [...]string{"notify", "lost-callback", "never"}[n%3]
	p.sent = time.Now()
	p.status, p.kind = l.call(http.MethodPost, "/v1/payments", p.member,
		map[string]any{"orderCode": p.code, "amountFen": 100 + n%900, "description": "chaos"}, nil)
	p.done = time.Now()
	l.mu.Lock()
	l.pays = append(l.pays, p)
	l.mu.Unlock()
	if p.kind != kindOK || p.plan == "never" {
		return
	}
	// The shopper pays a moment later; a provider that is down is tried
	// again for a while, as a shopper would.
	time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
	notify := p.plan == "notify"
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := l.http.Post(fmt.Sprintf("%s/admin/orders/%s/pay?notify=%t", l.s.URL(stacktest.PaySim), wechatpay.OutTradeNo(p.member, p.code), notify), "application/json", nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				l.mu.Lock()
				p.paid = true
				l.mu.Unlock()
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// call sends a JSON request as member and decodes a 2xx answer into out.
func (l *load) call(method, path, member string, in, out any) (int, string) {
	return l.callVia(l.http, method, path, member, in, out)
}

// callVia is call through client.
func (l *load) callVia(client *http.Client, method, path, member string, in, out any) (int, string) {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, l.s.URL(stacktest.Gateway)+path, body)
	req.Header.Set("Authorization", "Bearer "+l.tokens[member])
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return 0, kindRefused
		}
		return 0, kindUnknown
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, kindError
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, kindUnknown
		}
	}
	return resp.StatusCode, kindOK
}

// get reads a JSON document as member (no member: no token).
func (l *load) get(base, path, member string, out any) error {
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if member != "" {
		req.Header.Set("Authorization", "Bearer "+l.tokens[member])
	}
	resp, err := l.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// task is the part of a task the suite reads.
type task struct {
	TaskID    string `json:"taskId"`
	Status    string `json:"status"`
	RequestID string `json:"requestId"`
	OrderCode string `json:"orderCode"`
	ErrorCode int32  `json:"errorCode"`
	Result    struct {
		Shipments []struct {
			ShipmentID string `json:"shipmentId"`
		} `json:"shipments"`
	} `json:"result"`
}

func (t task) terminal() bool {
	return t.Status != "" && t.Status != "TASK_STATUS_PROCESSING"
}

// tasks lists every task of the load's members, keyed by request id.
func (l *load) tasks() (map[string]task, error) {
	out := map[string]task{}
	for _, m := range l.members {
		token := ""
		for {
			var page struct {
				Tasks         []task `json:"tasks"`
				NextPageToken string `json:"nextPageToken"`
			}
			if err := l.get(l.s.URL(stacktest.Gateway), "/v1/tasks?pageSize=100&pageToken="+url.QueryEscape(token), m, &page); err != nil {
				return nil, err
			}
			for _, t := range page.Tasks {
				out[t.RequestID] = t
			}
			if page.NextPageToken == "" {
				break
			}
			token = page.NextPageToken
		}
	}
	return out, nil
}

// paymentView is the part of a payment the suite reads.
type paymentView struct {
	Status     string    `json:"status"`
	CreateTime time.Time `json:"createTime"`
	Attempts   []struct {
		Time       time.Time `json:"time"`
		Action     string    `json:"action"`
		TradeState string    `json:"tradeState"`
	} `json:"attempts"`
}

func (p paymentView) terminal() bool {
	return p.Status == "PAYMENT_STATUS_PAID" || p.Status == "PAYMENT_STATUS_CLOSED"
}

func (l *load) payment(p *payment) (paymentView, error) {
	var out paymentView // the REST binding answers the payment itself
	err := l.get(l.s.URL(stacktest.Gateway), "/v1/payments/"+url.PathEscape(p.code), p.member, &out)
	return out, err
}

// providerState is the provider's trade state of an order.
func (l *load) providerState(member, code string) (string, error) {
	var o struct {
		TradeState string `json:"tradeState"`
	}
	err := l.get(l.s.URL(stacktest.PaySim), "/admin/orders/"+wechatpay.OutTradeNo(member, code), "", &o)
	return o.TradeState, err
}
