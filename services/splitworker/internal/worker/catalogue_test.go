package worker_test

import (
	"fmt"
	"testing"
	"time"

	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// A replica reads the catalogue once per CatalogueMaxAge, not once per
// order; with 0 it reads it for every order.
func TestCatalogueReadOncePerMaxAge(t *testing.T) {
	for _, tc := range []struct {
		maxAge time.Duration
		reads  int64
	}{{time.Hour, 1}, {0, 3}} {
		t.Run(tc.maxAge.String(), func(t *testing.T) {
			e := newEnv(t, fulfilmentsim.Options{Capacity: 8})
			e.start(worker.Options{CatalogueMaxAge: tc.maxAge})
			for i := range 3 {
				task := e.wait(e.submit("m1", fmt.Sprintf("CAT-%d", i), item("A1", "SKU-MUG", 1)))
				if task.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
					t.Fatalf("order %d = %v, want SUCCEEDED", i, task)
				}
			}
			if got := e.catalogueReads.Load(); got != tc.reads {
				t.Errorf("catalogue reads = %d for 3 orders, want %d", got, tc.reads)
			}
		})
	}
}

// A plan checked against a copy of the catalogue whose stock is out of
// date passes an item the fulfilment system no longer has: the system
// rejects the shipment, its item fails with the out-of-stock code, and the
// next order is checked against a fresh read.
func TestStaleStockFailsAtCreateAndIsReadAgain(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 8})
	e.start(worker.Options{CatalogueMaxAge: time.Hour})
	outOfStock := int32(errcodev1.ErrorCode_ERROR_CODE_OUT_OF_STOCK)
	for i, want := range []struct {
		status taskv1.TaskStatus
		msg    string // of the item's failure; "" when it shipped
	}{
		{taskv1.TaskStatus_TASK_STATUS_SUCCEEDED, ""},             // takes the last one; the copy still says 1
		{taskv1.TaskStatus_TASK_STATUS_SUCCEEDED, "out of stock"}, // planned on the copy, rejected by the system
		{taskv1.TaskStatus_TASK_STATUS_SUCCEEDED, "out of stock: 0 of SKU-LAST-ONE available"},
	} {
		task := e.wait(e.submit("m1", fmt.Sprintf("LAST-%d", i), item("A1", "SKU-LAST-ONE", 1)))
		fails := task.GetResult().GetFailures()
		switch {
		case task.GetStatus() != want.status:
			t.Fatalf("order %d = %v, want %s", i, task, want.status)
		case want.msg == "" && len(fails) != 0:
			t.Errorf("order %d failures = %v, want none", i, fails)
		case want.msg != "" && (len(fails) != 1 || fails[0].GetErrorCode() != outOfStock || fails[0].GetErrorMsg() != want.msg):
			t.Errorf("order %d failures = %v, want A1 %d %q", i, fails, outOfStock, want.msg)
		}
	}
	if got := e.catalogueReads.Load(); got != 2 {
		t.Errorf("catalogue reads = %d, want 2 (the first order's and the one after the rejection)", got)
	}
}
