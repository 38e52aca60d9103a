// Package smoke drives a running orderflow release through its gateway's
// REST API, the way a shop would: a member token, the fulfilment
// simulator's sample order through to SUCCEEDED with its shipments and item
// failures, and a payment nobody pays through to CLOSED. `make kube-smoke`
// runs it against pods started by podman kube play (adding a split-worker
// killed mid-order), and the chart's `helm test` hook runs it (cmd/smoke)
// against an installed release.
package smoke

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	paymentv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/payment/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/auth"
)

// Member is the member id the smoke's token is issued to.
const Member = "smoke"

// Token issues a member token signed with the release's JWT secret (the
// chart's Secret key jwt-secret), with the issuer and audience the gateway
// checks when they are configured.
func Token(secret []byte, issuer, audience string, now time.Time) (string, error) {
	return auth.Issue(auth.Config{Secret: secret, Issuer: issuer, Audience: audience}, Member, now, time.Hour)
}

// Client calls one gateway's REST API as one member.
type Client struct {
	// Gateway is the gateway's HTTP base URL, e.g. http://orderflow-gateway:8080.
	Gateway string
	// Token is the member's bearer token.
	Token string
	// HTTP is the client used; nil means one with a 10 s timeout.
	HTTP *http.Client
	// Poll is the interval between reads while waiting; 0 means 200 ms.
	Poll time.Duration
}

// SampleOrder is the fulfilment simulator's sample order (the page's
// default): with the default catalogue it makes two shipments (WH-BEIJING,
// WH-SHANGHAI) and two item failures (A4 unknown SKU 10002, A5 out of
// stock 10004).
func SampleOrder(orderCode string) *gatewayv1.CreateOrderSplitRequest {
	item := func(code, sku string, qty int32) *taskv1.OrderItem {
		return &taskv1.OrderItem{ItemCode: code, Sku: sku, Quantity: qty}
	}
	return &gatewayv1.CreateOrderSplitRequest{OrderCode: orderCode, RequestId: orderCode, Items: []*taskv1.OrderItem{
		item("A1", "SKU-TEA-500G", 2), item("A2", "SKU-RICE-10KG", 1), item("A3", "SKU-KETTLE", 1),
		item("A4", "SKU-NOPE", 1), item("A5", "SKU-LAST-ONE", 3), item("A6", "SKU-OIL-5L", 2),
	}}
}

// CheckSample checks that t is the sample order's expected result.
func CheckSample(t *taskv1.Task) error {
	if t.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
		return fmt.Errorf("task %s is %s (error %d %q), want SUCCEEDED", t.GetTaskId(), t.GetStatus(), t.GetErrorCode(), t.GetErrorMsg())
	}
	r := t.GetResult()
	var warehouses []string
	ids := map[string]bool{}
	for _, s := range r.GetShipments() {
		warehouses = append(warehouses, s.GetWarehouse())
		if s.GetShipmentId() == "" || ids[s.GetShipmentId()] {
			return fmt.Errorf("task %s: shipment id %q missing or repeated", t.GetTaskId(), s.GetShipmentId())
		}
		ids[s.GetShipmentId()] = true
	}
	slices.Sort(warehouses)
	var failures []string
	for _, f := range r.GetFailures() {
		failures = append(failures, fmt.Sprintf("%s:%d", f.GetItemCode(), f.GetErrorCode()))
	}
	slices.Sort(failures)
	if got, want := strings.Join(warehouses, ","), "WH-BEIJING,WH-SHANGHAI"; got != want {
		return fmt.Errorf("task %s: shipments from %q, want %q", t.GetTaskId(), got, want)
	}
	if got, want := strings.Join(failures, ","), "A4:10002,A5:10004"; got != want {
		return fmt.Errorf("task %s: item failures %q, want %q", t.GetTaskId(), got, want)
	}
	if r.GetTotal() != 6 || r.GetSucceeded() != 4 || r.GetFailed() != 2 {
		return fmt.Errorf("task %s: total/succeeded/failed = %d/%d/%d, want 6/4/2", t.GetTaskId(), r.GetTotal(), r.GetSucceeded(), r.GetFailed())
	}
	return nil
}

// SubmitOrder submits an order split and returns the accepted task.
func (c *Client) SubmitOrder(ctx context.Context, req *gatewayv1.CreateOrderSplitRequest) (*taskv1.Task, error) {
	var t taskv1.Task // the REST answer is the task itself (response_body: task)
	if err := c.call(ctx, http.MethodPost, "/v1/order-splits", req, &t); err != nil {
		return nil, fmt.Errorf("submit order %s: %w", req.GetOrderCode(), err)
	}
	if t.GetTaskId() == "" {
		return nil, fmt.Errorf("submit order %s: the answer has no task id", req.GetOrderCode())
	}
	return &t, nil
}

// Task reads a task.
func (c *Client) Task(ctx context.Context, id string) (*taskv1.Task, error) {
	var t taskv1.Task
	if err := c.call(ctx, http.MethodGet, "/v1/tasks/"+id, nil, &t); err != nil {
		return nil, fmt.Errorf("get task %s: %w", id, err)
	}
	return &t, nil
}

// WaitTask reads the task until it is no longer PROCESSING or ctx ends.
func (c *Client) WaitTask(ctx context.Context, id string) (*taskv1.Task, error) {
	var last *taskv1.Task
	err := c.poll(ctx, func() (bool, error) {
		t, err := c.Task(ctx, id)
		if err != nil {
			return false, err
		}
		last = t
		return t.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING, nil
	})
	if err != nil {
		return last, fmt.Errorf("wait for task %s (last %s): %w", id, last.GetStatus(), err)
	}
	return last, nil
}

// CreatePayment places a payment order.
func (c *Client) CreatePayment(ctx context.Context, orderCode string, amountFen int64) (*paymentv1.Payment, error) {
	var p paymentv1.Payment // the REST answer is the payment itself
	req := &gatewayv1.CreatePaymentRequest{OrderCode: orderCode, AmountFen: amountFen, Description: "orderflow smoke"}
	if err := c.call(ctx, http.MethodPost, "/v1/payments", req, &p); err != nil {
		return nil, fmt.Errorf("create payment %s: %w", orderCode, err)
	}
	return &p, nil
}

// WaitPayment reads the payment until it has status want or ctx ends; a
// payment that reaches another final status fails at once.
func (c *Client) WaitPayment(ctx context.Context, orderCode string, want paymentv1.PaymentStatus) (*paymentv1.Payment, error) {
	var last *paymentv1.Payment
	err := c.poll(ctx, func() (bool, error) {
		var p paymentv1.Payment
		if err := c.call(ctx, http.MethodGet, "/v1/payments/"+orderCode, nil, &p); err != nil {
			return false, err
		}
		last = &p
		switch s := last.GetStatus(); {
		case s == want:
			return true, nil
		case s != paymentv1.PaymentStatus_PAYMENT_STATUS_UNPAID:
			return false, errStop{fmt.Errorf("payment %s is %s, want %s", orderCode, s, want)}
		}
		return false, nil
	})
	if err != nil {
		return last, fmt.Errorf("wait for payment %s to be %s (last %s, %d attempts): %w",
			orderCode, want, last.GetStatus(), len(last.GetAttempts()), err)
	}
	return last, nil
}

// errStop wraps an error that ends polling at once.
type errStop struct{ error }

func (c *Client) poll(ctx context.Context, done func() (bool, error)) error {
	every := c.Poll
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	var lastErr error
	for {
		ok, err := done()
		switch {
		case err == nil && ok:
			return nil
		case err != nil && !isTransient(err):
			return err
		case err != nil:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), lastErr)
		case <-time.After(every):
		}
	}
}

// isTransient reports whether a read may succeed when repeated (the
// gateway restarting, a 5xx); a 4xx or a wrong final state is permanent.
func isTransient(err error) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status >= 500 || he.Status == http.StatusTooManyRequests
	}
	var stop errStop
	return !errors.As(err, &stop)
}

// HTTPError is a gateway answer other than 2xx.
type HTTPError struct {
	// Status is the HTTP status code.
	Status int
	// Body is the start of the answer (a google.rpc.Status as JSON).
	Body string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

func (c *Client) call(ctx context.Context, method, path string, in, out proto.Message) error {
	var body io.Reader
	if in != nil {
		b, err := protojson.Marshal(in)
		if err != nil {
			return errStop{err}
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Gateway, "/")+path, body)
	if err != nil {
		return errStop{err}
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &HTTPError{Status: resp.StatusCode, Body: string(data[:min(len(data), 300)])}
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, out); err != nil {
		return errStop{fmt.Errorf("decode %s %s: %w", method, path, err)}
	}
	return nil
}
