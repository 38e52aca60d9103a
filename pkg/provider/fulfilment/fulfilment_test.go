package fulfilment_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
)

func TestErrorClassification(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		transient bool
		is        error
	}{
		{"over capacity", http.StatusTooManyRequests, `{"error":"OVER_CAPACITY"}`, true, fulfilment.ErrOverCapacity},
		{"server error", http.StatusBadGateway, ``, true, fulfilment.ErrUnavailable},
		{"not found", http.StatusNotFound, `{"error":"NOT_FOUND"}`, false, fulfilment.ErrNotFound},
		{"bad request", http.StatusBadRequest, `{"error":"BAD_REQUEST"}`, false, nil},
		{"rejected", http.StatusConflict, `{"error":"OUT_OF_STOCK","message":"none left"}`, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			_, err := fulfilment.NewClient(srv.URL, nil).CreateShipment(context.Background(), fulfilment.ShipmentRequest{})
			if err == nil {
				t.Fatalf("CreateShipment() error = nil, want an error")
			}
			if got := fulfilment.IsTransient(err); got != tt.transient {
				t.Errorf("IsTransient(%v) = %v, want %v", err, got, tt.transient)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("CreateShipment() error = %v, want %v", err, tt.is)
			}
		})
	}

	var rej *fulfilment.RejectedError
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"OUT_OF_STOCK","message":"none left"}`))
	}))
	_, err := fulfilment.NewClient(srv.URL, nil).CreateShipment(context.Background(), fulfilment.ShipmentRequest{})
	if !errors.As(err, &rej) || rej.Code != "OUT_OF_STOCK" || rej.Message != "none left" {
		t.Errorf("CreateShipment() error = %v, want RejectedError OUT_OF_STOCK", err)
	}
	srv.Close()
	if _, err := fulfilment.NewClient(srv.URL, nil).Stats(context.Background()); !errors.Is(err, fulfilment.ErrUnavailable) {
		t.Errorf("Stats() on a closed server error = %v, want ErrUnavailable", err)
	}
}

// TestRequestNotSentOnlyWithoutAConnection: a refused connection says the
// request never left (ErrNotSent, with ErrUnavailable); a connection the
// system accepted and dropped without an answer does not (the request may
// have been read and acted on).
func TestRequestNotSentOnlyWithoutAConnection(t *testing.T) {
	ctx := context.Background()
	req := fulfilment.ShipmentRequest{IdempotencyKey: "k", Warehouse: "WH", Lines: []fulfilment.ShipmentLine{{ItemCode: "M", SKU: "SKU-MUG", Quantity: 1}}}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	_, err = fulfilment.NewClient("http://"+addr, nil).CreateShipment(ctx, req)
	if !errors.Is(err, fulfilment.ErrNotSent) || !errors.Is(err, fulfilment.ErrUnavailable) {
		t.Errorf("CreateShipment to a refused port = %v, want ErrNotSent and ErrUnavailable", err)
	}

	dropping, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dropping.Close()
	go func() {
		for {
			c, err := dropping.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096)) // the request arrives, no answer
			c.Close()
		}
	}()
	_, err = fulfilment.NewClient("http://"+dropping.Addr().String(), nil).CreateShipment(ctx, req)
	if !errors.Is(err, fulfilment.ErrUnavailable) || errors.Is(err, fulfilment.ErrNotSent) {
		t.Errorf("CreateShipment dropped after it was read = %v, want ErrUnavailable without ErrNotSent", err)
	}
}

// TestCallTimeout: the HTTP client's Timeout bounds a call whose answer
// never comes, and also one whose body stops half way, as a transient
// error; the caller's own earlier deadline wins.
func TestCallTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/shipments/half" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"jobId":`))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	c := fulfilment.NewClient(srv.URL, fulfilment.NewHTTPClient(200*time.Millisecond))
	for _, id := range []string{"silent", "half"} {
		start := time.Now()
		_, err := c.Job(context.Background(), id)
		if !errors.Is(err, fulfilment.ErrUnavailable) {
			t.Errorf("Job(%s) = %v, want ErrUnavailable after the timeout", id, err)
		}
		if took := time.Since(start); took < 150*time.Millisecond || took > 3*time.Second {
			t.Errorf("Job(%s) took %v, want about the 200ms timeout", id, took)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Job(ctx, "silent"); err == nil {
		t.Error("Job under a 50ms deadline succeeded")
	}
	if took := time.Since(start); took > 150*time.Millisecond {
		t.Errorf("Job under a 50ms deadline took %v", took)
	}
}
