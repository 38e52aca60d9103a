// Package fulfilment is the wire contract of the fulfilment system (the
// legacy warehouse management system that creates shipments) and a Go
// client for it. The system speaks JSON over HTTP:
//
//	GET  /catalogue              -> Catalogue
//	GET  /members/{memberId}     -> Member
//	POST /shipments              ShipmentRequest -> 202 Job (new) | 200 Job (repeated idempotency key)
//	                             | 429 {"error":"OVER_CAPACITY"} | 409 {"error":code,"message":...}
//	GET  /shipments/{jobId}      -> Job
//	GET  /stats                  -> Stats
//	POST /admin/reset, PUT /admin/config, PUT /admin/catalogue,
//	POST /admin/fail-catalogue?count=N
//
// Errors from the client tell transient failures (network, 5xx, 429:
// retry later) from permanent ones (IsTransient).
package fulfilment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/cost"
	"github.com/orderflow/orderflow/pkg/platform/tracehttp"
)

// SKU is one stock-keeping unit the fulfilment system stocks.
type SKU struct {
	SKU                string `json:"sku"`
	Warehouse          string `json:"warehouse"`
	Stock              int    `json:"stock"`
	WeightGrams        int    `json:"weightGrams"`
	SettlementRequired bool   `json:"settlementRequired"`
}

// Catalogue lists what the fulfilment system stocks and which members have
// an unpaid bill.
type Catalogue struct {
	SKUs          []SKU    `json:"skus"`
	UnpaidMembers []string `json:"unpaidMembers"`
}

// Member is a member's standing at the fulfilment system.
type Member struct {
	MemberID   string `json:"memberId"`
	BillUnpaid bool   `json:"billUnpaid"`
}

// ShipmentLine is one order item in a shipment request.
type ShipmentLine struct {
	ItemCode string `json:"itemCode"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// ShipmentRequest asks for one shipment from one warehouse. A request
// repeating an IdempotencyKey gets the job of the first one.
type ShipmentRequest struct {
	IdempotencyKey string         `json:"idempotencyKey"`
	Warehouse      string         `json:"warehouse"`
	Lines          []ShipmentLine `json:"lines"`
}

// JobState is where a shipment job is.
type JobState string

// The states of a shipment job.
const (
	JobRunning   JobState = "RUNNING"
	JobCompleted JobState = "COMPLETED"
	JobError     JobState = "ERROR"
)

// Job is a shipment job at the fulfilment system.
type Job struct {
	JobID      string   `json:"jobId"`
	State      JobState `json:"state"`
	ShipmentID string   `json:"shipmentId,omitempty"`
	ErrorCode  string   `json:"errorCode,omitempty"`
	ErrorMsg   string   `json:"errorMsg,omitempty"`
}

// Done reports whether the job has finished (completed or failed).
func (j Job) Done() bool { return j.State == JobCompleted || j.State == JobError }

// Stats are the fulfilment system's counters.
type Stats struct {
	// Capacity is the number of jobs that may run at once.
	Capacity int `json:"capacity"`
	// Running is the number of jobs running now.
	Running int `json:"running"`
	// MaxConcurrent is the highest Running ever observed.
	MaxConcurrent int `json:"maxConcurrent"`
	// Created counts accepted shipment jobs.
	Created int `json:"created"`
	// Duplicates counts requests that repeated an idempotency key.
	Duplicates int `json:"duplicates"`
	// RejectedOverCapacity counts requests refused with 429.
	RejectedOverCapacity int `json:"rejectedOverCapacity"`
	// Completed counts jobs that completed.
	Completed int `json:"completed"`
	// Failed counts jobs that ended in ERROR.
	Failed int `json:"failed"`
}

// Config changes the simulator's behaviour; nil fields are left as they
// are.
type Config struct {
	Capacity      *int     `json:"capacity,omitempty"`
	MinDurationMs *int     `json:"minDurationMs,omitempty"`
	MaxDurationMs *int     `json:"maxDurationMs,omitempty"`
	ErrorRate     *float64 `json:"errorRate,omitempty"`
}

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

// Business rejection codes answered with 409.
const (
	CodeOverCapacity     = "OVER_CAPACITY"
	CodeOutOfStock       = "OUT_OF_STOCK"
	CodeUnknownSKU       = "UNKNOWN_SKU"
	CodeUnknownWarehouse = "UNKNOWN_WAREHOUSE"
	CodeWrongWarehouse   = "WRONG_WAREHOUSE"
	CodeInvalidQuantity  = "INVALID_QUANTITY"
	CodeBadRequest       = "BAD_REQUEST"
	CodeNotFound         = "NOT_FOUND"
)

var (
	// ErrOverCapacity means every slot of the fulfilment system is busy
	// (429); retry later. It is transient.
	ErrOverCapacity = errors.New("fulfilment system over capacity")
	// ErrUnavailable means the fulfilment system could not be reached or
	// failed (network error or 5xx); retry later. It is transient.
	ErrUnavailable = errors.New("fulfilment system unavailable")
	// ErrNotSent comes with ErrUnavailable when the request never left:
	// no connection to the fulfilment system could be made (refused,
	// unreachable, name not found), so the system cannot have acted on it.
	ErrNotSent = errors.New("request not sent")
	// ErrNotFound means the job or member does not exist (404).
	ErrNotFound = errors.New("fulfilment: not found")
)

// RejectedError is a business rejection of a shipment (409). It is
// permanent: the same request is rejected again.
type RejectedError struct {
	Code    string
	Message string
}

func (e *RejectedError) Error() string {
	return "fulfilment rejected shipment: " + e.Code + ": " + e.Message
}

// StatusError is an unexpected HTTP answer that is neither transient nor a
// business rejection (a 4xx other than 404, 409 and 429).
type StatusError struct {
	StatusCode int
	Body       string
}

func (e *StatusError) Error() string {
	return "fulfilment: unexpected status " + strconv.Itoa(e.StatusCode) + ": " + e.Body
}

// IsTransient reports whether err is worth retrying later: the system was
// unreachable, failed with 5xx or had no free slot.
func IsTransient(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOverCapacity)
}

// Client calls the fulfilment system.
type Client struct {
	base    string
	hc      *http.Client
	timeout time.Duration // of each call, answer read included; none when 0
}

// NewClient returns a client of the system at baseURL (for example
// "http://127.0.0.1:8082"); hc may be nil for NewHTTPClient(5s). hc's
// Timeout bounds each call as a deadline on the call's context: given a
// transport other than net/http's own (this package's is wrapped for
// tracing and counting), net/http applies Client.Timeout through two
// goroutines and a timer per call.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = NewHTTPClient(5 * time.Second)
	}
	own := *hc
	own.Timeout = 0
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: &own, timeout: hc.Timeout}
}

// NewHTTPClient returns an HTTP client suited to many concurrent calls to
// one host: unlike http.DefaultTransport (2 idle connections per host) it
// keeps up to 256 idle connections, so busy workers do not open a new
// connection per call. timeout bounds each call. Calls under an order
// step's context are counted (package cost, peer "fulfilment").
func NewHTTPClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 256
	return &http.Client{Transport: cost.Transport(tracehttp.Transport(tr, spanName), "fulfilment"), Timeout: timeout}
}

// spanName names a call's client span by method and route, e.g.
// "GET /shipments/{jobId}".
func spanName(r *http.Request) string { return r.Method + " " + route(r.URL.Path) }

// route returns the route of a request path of the fulfilment API: the
// path with its job or member id replaced by a placeholder.
func route(path string) string {
	for _, r := range []struct{ segment, param string }{{"/shipments/", "{jobId}"}, {"/members/", "{memberId}"}} {
		if i := strings.LastIndex(path, r.segment); i >= 0 && len(path) > i+len(r.segment) {
			return path[:i+len(r.segment)] + r.param
		}
	}
	return path
}

// Catalogue returns the SKUs the system stocks and the unpaid members.
func (c *Client) Catalogue(ctx context.Context) (Catalogue, error) {
	var cat Catalogue
	err := c.do(ctx, http.MethodGet, "/catalogue", nil, &cat)
	return cat, err
}

// Member returns a member's standing.
func (c *Client) Member(ctx context.Context, id string) (Member, error) {
	var m Member
	err := c.do(ctx, http.MethodGet, "/members/"+url.PathEscape(id), nil, &m)
	return m, err
}

// CreateShipment requests a shipment job. It returns ErrOverCapacity when
// no slot is free and a *RejectedError for a business rejection. A repeated
// idempotency key returns the job of the first request.
func (c *Client) CreateShipment(ctx context.Context, req ShipmentRequest) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, "/shipments", req, &j)
	return j, err
}

// Job returns a shipment job's state.
func (c *Client) Job(ctx context.Context, jobID string) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodGet, "/shipments/"+url.PathEscape(jobID), nil, &j)
	return j, err
}

// Stats returns the system's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.do(ctx, http.MethodGet, "/stats", nil, &s)
	return s, err
}

// Reset puts counters, jobs and stock back to their initial state
// (simulator admin).
func (c *Client) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/admin/reset", nil, nil)
}

// SetConfig changes capacity, job durations or error rate (simulator
// admin).
func (c *Client) SetConfig(ctx context.Context, cfg Config) error {
	return c.do(ctx, http.MethodPut, "/admin/config", cfg, nil)
}

// SetCatalogue replaces the catalogue and unpaid members; stock restarts
// from it (simulator admin).
func (c *Client) SetCatalogue(ctx context.Context, cat Catalogue) error {
	return c.do(ctx, http.MethodPut, "/admin/catalogue", cat, nil)
}

// FailCatalogue makes the next n catalogue calls answer 500 (simulator
// admin).
func (c *Client) FailCatalogue(ctx context.Context, n int) error {
	return c.do(ctx, http.MethodPost, "/admin/fail-catalogue?count="+strconv.Itoa(n), nil, nil)
}

// do sends a request with an optional JSON body and decodes a 2xx answer
// into out, mapping error answers to the package's errors.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("fulfilment %s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("fulfilment %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if notConnected(err) {
			return fmt.Errorf("%w: %w: %s %s: %w", ErrUnavailable, ErrNotSent, method, path, err)
		}
		return fmt.Errorf("%w: %s %s: %w", ErrUnavailable, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%w: %s %s: read: %w", ErrUnavailable, method, path, err)
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if out == nil || len(data) == 0 {
			return nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("fulfilment %s %s: decode: %w", method, path, err)
		}
		return nil
	case resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%s %s: %w", method, path, ErrOverCapacity)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: %s %s: status %d", ErrUnavailable, method, path, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, ErrNotFound)
	case resp.StatusCode == http.StatusConflict:
		var eb ErrorBody
		_ = json.Unmarshal(data, &eb)
		return &RejectedError{Code: eb.Error, Message: eb.Message}
	default:
		return &StatusError{StatusCode: resp.StatusCode, Body: string(data)}
	}
}

// notConnected reports whether err says that no connection could be made
// (net/http writes a request only on a connection it has): dialing the
// system, or a proxy to it, failed.
func notConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect")
}
