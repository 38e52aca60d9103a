package fulfilmentsim_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
)

func start(t *testing.T, opts fulfilmentsim.Options) (*fulfilment.Client, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	opts.Clock = fc
	srv := httptest.NewServer(fulfilmentsim.New(opts))
	t.Cleanup(srv.Close)
	return fulfilment.NewClient(srv.URL, srv.Client()), fc
}

func req(key, wh string, lines ...fulfilment.ShipmentLine) fulfilment.ShipmentRequest {
	return fulfilment.ShipmentRequest{IdempotencyKey: key, Warehouse: wh, Lines: lines}
}

func line(code, sku string, qty int) fulfilment.ShipmentLine {
	return fulfilment.ShipmentLine{ItemCode: code, SKU: sku, Quantity: qty}
}

func TestCapacityDuplicatesAndStats(t *testing.T) {
	ctx := context.Background()
	c, fc := start(t, fulfilmentsim.Options{Capacity: 2, MinDuration: time.Second, MaxDuration: time.Second})

	j1, err := c.CreateShipment(ctx, req("t/1", "WH-SHANGHAI", line("a", "SKU-MUG", 1)))
	if err != nil {
		t.Fatalf("CreateShipment(t/1) error = %v", err)
	}
	if j1.State != fulfilment.JobRunning {
		t.Errorf("CreateShipment(t/1).State = %s, want RUNNING", j1.State)
	}
	if _, err := c.CreateShipment(ctx, req("t/2", "WH-SHANGHAI", line("a", "SKU-MUG", 1))); err != nil {
		t.Fatalf("CreateShipment(t/2) error = %v", err)
	}
	// A repeated key returns the same job even when the slots are full.
	dup, err := c.CreateShipment(ctx, req("t/1", "WH-SHANGHAI", line("a", "SKU-MUG", 1)))
	if err != nil || dup.JobID != j1.JobID {
		t.Errorf("CreateShipment(t/1 again) = %v, %v, want job %s", dup, err, j1.JobID)
	}
	_, err = c.CreateShipment(ctx, req("t/3", "WH-SHANGHAI", line("a", "SKU-MUG", 1)))
	if !errors.Is(err, fulfilment.ErrOverCapacity) || !fulfilment.IsTransient(err) {
		t.Errorf("CreateShipment(t/3) error = %v, want ErrOverCapacity (transient)", err)
	}

	fc.Advance(time.Second)
	got, err := c.Job(ctx, j1.JobID)
	if err != nil {
		t.Fatalf("Job(%s) error = %v", j1.JobID, err)
	}
	if got.State != fulfilment.JobCompleted || got.ShipmentID == "" {
		t.Errorf("Job(%s) = %+v, want COMPLETED with a shipment id", j1.JobID, got)
	}
	if _, err := c.CreateShipment(ctx, req("t/3", "WH-SHANGHAI", line("a", "SKU-MUG", 1))); err != nil {
		t.Fatalf("CreateShipment(t/3) after jobs ended error = %v", err)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fulfilment.Stats{Capacity: 2, Running: 1, MaxConcurrent: 2, Created: 3, Duplicates: 1,
		RejectedOverCapacity: 1, Completed: 2}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("Stats() mismatch (-want +got):\n%s", diff)
	}

	if err := c.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ = c.Stats(ctx)
	if diff := cmp.Diff(fulfilment.Stats{Capacity: 2}, st); diff != "" {
		t.Errorf("Stats() after reset mismatch (-want +got):\n%s", diff)
	}
}

func TestRejections(t *testing.T) {
	ctx := context.Background()
	c, _ := start(t, fulfilmentsim.Options{})
	tests := []struct {
		name string
		req  fulfilment.ShipmentRequest
		code string
	}{
		{"unknown sku", req("k1", "WH-SHANGHAI", line("a", "SKU-NOPE", 1)), fulfilment.CodeUnknownSKU},
		{"out of stock", req("k2", "WH-SHANGHAI", line("a", "SKU-LAST-ONE", 2)), fulfilment.CodeOutOfStock},
		{"out of stock across lines", req("k3", "WH-SHANGHAI", line("a", "SKU-LAST-ONE", 1), line("b", "SKU-LAST-ONE", 1)), fulfilment.CodeOutOfStock},
		{"wrong warehouse", req("k4", "WH-BEIJING", line("a", "SKU-MUG", 1)), fulfilment.CodeWrongWarehouse},
		{"unknown warehouse", req("k5", "WH-MOON", line("a", "SKU-MUG", 1)), fulfilment.CodeUnknownWarehouse},
		{"zero quantity", req("k6", "WH-SHANGHAI", line("a", "SKU-MUG", 0)), fulfilment.CodeInvalidQuantity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.CreateShipment(ctx, tt.req)
			var rej *fulfilment.RejectedError
			if !errors.As(err, &rej) || rej.Code != tt.code {
				t.Fatalf("CreateShipment(%+v) error = %v, want RejectedError %s", tt.req, err, tt.code)
			}
			if fulfilment.IsTransient(err) {
				t.Errorf("IsTransient(%v) = true, want false", err)
			}
		})
	}
}

func TestStockAndErrors(t *testing.T) {
	ctx := context.Background()
	c, fc := start(t, fulfilmentsim.Options{ErrorRate: 1, MinDuration: 10 * time.Millisecond, MaxDuration: 20 * time.Millisecond})
	j, err := c.CreateShipment(ctx, req("k", "WH-SHANGHAI", line("a", "SKU-LAST-ONE", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if stock := skuStock(t, c, "SKU-LAST-ONE"); stock != 0 {
		t.Errorf("stock of SKU-LAST-ONE while job runs = %d, want 0", stock)
	}
	fc.Advance(20 * time.Millisecond)
	got, _ := c.Job(ctx, j.JobID)
	if got.State != fulfilment.JobError || got.ErrorCode == "" {
		t.Errorf("Job(%s) = %+v, want ERROR with a code", j.JobID, got)
	}
	if stock := skuStock(t, c, "SKU-LAST-ONE"); stock != 1 {
		t.Errorf("stock of SKU-LAST-ONE after the job failed = %d, want 1", stock)
	}
	if st, _ := c.Stats(ctx); st.Failed != 1 || st.Running != 0 {
		t.Errorf("Stats() = %+v, want Failed 1, Running 0", st)
	}
	if _, err := c.Job(ctx, "job-999"); !errors.Is(err, fulfilment.ErrNotFound) {
		t.Errorf("Job(job-999) error = %v, want ErrNotFound", err)
	}
}

func TestJobOfNoTimeEndsAtCreate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		errRate   float64
		want      fulfilment.JobState
		wantStock int
	}{{"completed", 0, fulfilment.JobCompleted, 0}, {"failed", 1, fulfilment.JobError, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := start(t, fulfilmentsim.Options{Capacity: 1, ErrorRate: tc.errRate})
			j, err := c.CreateShipment(ctx, req("k", "WH-SHANGHAI", line("a", "SKU-LAST-ONE", 1)))
			if err != nil {
				t.Fatal(err)
			}
			if j.State != tc.want || (tc.want == fulfilment.JobCompleted) != (j.ShipmentID != "") {
				t.Errorf("CreateShipment() = %+v, want %s (with a shipment id when completed)", j, tc.want)
			}
			if stock := skuStock(t, c, "SKU-LAST-ONE"); stock != tc.wantStock {
				t.Errorf("stock of SKU-LAST-ONE = %d, want %d", stock, tc.wantStock)
			}
			// The ended job holds no capacity: the next create is accepted.
			if _, err := c.CreateShipment(ctx, req("k2", "WH-SHANGHAI", line("a", "SKU-MUG", 1))); err != nil {
				t.Errorf("CreateShipment(k2) error = %v, want a job", err)
			}
			if got, err := c.Job(ctx, j.JobID); err != nil || got != j {
				t.Errorf("Job(%s) = %+v, %v, want %+v", j.JobID, got, err, j)
			}
		})
	}
}

func skuStock(t *testing.T, c *fulfilment.Client, sku string) int {
	t.Helper()
	cat, err := c.Catalogue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range cat.SKUs {
		if k.SKU == sku {
			return k.Stock
		}
	}
	t.Fatalf("sku %s not in catalogue", sku)
	return 0
}

func TestAdmin(t *testing.T) {
	ctx := context.Background()
	c, _ := start(t, fulfilmentsim.Options{})
	if m, err := c.Member(ctx, "member-unpaid"); err != nil || !m.BillUnpaid {
		t.Errorf("Member(member-unpaid) = %+v, %v, want billUnpaid", m, err)
	}
	if m, err := c.Member(ctx, "demo"); err != nil || m.BillUnpaid {
		t.Errorf("Member(demo) = %+v, %v, want bill paid", m, err)
	}
	if err := c.FailCatalogue(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := c.Catalogue(ctx); !errors.Is(err, fulfilment.ErrUnavailable) {
			t.Errorf("Catalogue() #%d error = %v, want ErrUnavailable", i, err)
		}
	}
	if _, err := c.Catalogue(ctx); err != nil {
		t.Errorf("Catalogue() after failures error = %v", err)
	}
	cat := fulfilment.Catalogue{SKUs: []fulfilment.SKU{{SKU: "X", Warehouse: "W", Stock: 1, WeightGrams: 1}}, UnpaidMembers: []string{"bob"}}
	if err := c.SetCatalogue(ctx, cat); err != nil {
		t.Fatal(err)
	}
	got, _ := c.Catalogue(ctx)
	if diff := cmp.Diff(cat, got); diff != "" {
		t.Errorf("Catalogue() after SetCatalogue mismatch (-want +got):\n%s", diff)
	}
	capacity := 0
	if err := c.SetConfig(ctx, fulfilment.Config{Capacity: &capacity}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateShipment(ctx, req("k", "W", line("a", "X", 1))); !errors.Is(err, fulfilment.ErrOverCapacity) {
		t.Errorf("CreateShipment with capacity 0 error = %v, want ErrOverCapacity", err)
	}
	bad := -1
	if err := c.SetConfig(ctx, fulfilment.Config{MinDurationMs: &bad}); err == nil || fulfilment.IsTransient(err) {
		t.Errorf("SetConfig(minDurationMs -1) error = %v, want a permanent error", err)
	}
}
