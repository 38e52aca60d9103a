package slotpool

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCapacityHandlerChangesCapacity(t *testing.T) {
	pools := replicas(t, 1, Options{Capacity: 1, Lease: 5 * time.Second})
	p := pools[0]
	runJanitors(t, p)
	ctx := context.Background()
	held := mustAcquire(t, p, "first")
	waiting := acquireAsync(ctx, p, "second")

	srv := httptest.NewServer(p.CapacityHandler())
	defer srv.Close()
	for _, tc := range []struct {
		method, body string
		want         int
	}{
		{"PUT", `{"capacity": -1}`, http.StatusBadRequest},
		{"PUT", `{"cap": 2}`, http.StatusBadRequest},
		{"PUT", `not json`, http.StatusBadRequest},
		{"GET", ``, http.StatusMethodNotAllowed},
		{"PUT", `{"capacity": 2}`, http.StatusNoContent},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.body, resp.StatusCode, tc.want)
		}
	}
	select {
	case a := <-waiting:
		if a.err != nil {
			t.Fatalf("waiter: %v", a.err)
		}
		_ = a.slot.Release(ctx, Completed, "")
	case <-time.After(5 * time.Second):
		t.Fatal("raising the capacity over HTTP did not grant the waiter")
	}
	if s := mustSnapshot(t, p); s.Capacity != 2 {
		t.Errorf("capacity = %d, want 2", s.Capacity)
	}
	_ = held.Release(ctx, Completed, "")
}
