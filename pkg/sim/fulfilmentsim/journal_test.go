package fulfilmentsim_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
)

// TestRestoreRemembersJobs restarts the simulator from its journal: a job
// accepted before the restart keeps its id, ends as it would have, and a
// repeated idempotency key is a duplicate, not a new job.
func TestRestoreRemembersJobs(t *testing.T) {
	ctx := context.Background()
	fc := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	var journal bytes.Buffer
	opts := fulfilmentsim.Options{Capacity: 2, MinDuration: time.Second, MaxDuration: time.Second, Clock: fc}
	sim1 := fulfilmentsim.New(opts)
	sim1.SetJournal(&journal)
	first := httptest.NewServer(sim1)
	c := fulfilment.NewClient(first.URL, first.Client())
	j1, err := c.CreateShipment(ctx, req("t/1", "WH-SHANGHAI", line("a", "SKU-MUG", 1)))
	if err != nil {
		t.Fatalf("CreateShipment(t/1) error = %v", err)
	}
	first.Close()
	journal.WriteString(`{"job":{"jobId":"job-9","idem`) // a line torn by a crash

	sim := fulfilmentsim.New(opts)
	if err := sim.Restore(bytes.NewReader(journal.Bytes())); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	second := httptest.NewServer(sim)
	defer second.Close()
	c = fulfilment.NewClient(second.URL, second.Client())
	again, err := c.CreateShipment(ctx, req("t/1", "WH-SHANGHAI", line("a", "SKU-MUG", 1)))
	if err != nil || again.JobID != j1.JobID {
		t.Errorf("CreateShipment(t/1) after restart = %v, %v, want job %s", again, err, j1.JobID)
	}
	fc.Advance(time.Second)
	got, err := c.Job(ctx, j1.JobID)
	if err != nil || got.State != fulfilment.JobCompleted {
		t.Errorf("Job(%s) after restart = %v, %v, want COMPLETED", j1.JobID, got, err)
	}
	st := sim.Stats()
	if st.Created != 1 || st.Duplicates != 1 || st.Completed != 1 {
		t.Errorf("Stats() = %+v, want created 1, duplicates 1, completed 1", st)
	}
	j2, err := c.CreateShipment(ctx, req("t/2", "WH-SHANGHAI", line("a", "SKU-MUG", 1)))
	if err != nil || j2.JobID == j1.JobID {
		t.Errorf("CreateShipment(t/2) = %v, %v, want a new job id", j2, err)
	}
}
