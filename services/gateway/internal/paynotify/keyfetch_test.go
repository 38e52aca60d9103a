package paynotify_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
	"github.com/orderflow/orderflow/services/gateway/internal/paynotify"
)

// certGate sits in front of the simulator's GET /v3/certificates: it
// counts the fetches and, when armed, holds each one until released or
// answers 503.
type certGate struct {
	next    http.Handler
	fetches atomic.Int64
	// entered receives one value per fetch that reached the gate.
	entered chan struct{}

	mu      sync.Mutex
	hold    chan struct{} // nil: pass through
	failing bool
}

func (g *certGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v3/certificates" {
		g.next.ServeHTTP(w, r)
		return
	}
	g.fetches.Add(1)
	g.mu.Lock()
	hold, failing := g.hold, g.failing
	g.mu.Unlock()
	select {
	case g.entered <- struct{}{}:
	default:
	}
	if hold != nil {
		<-hold
	}
	if failing {
		http.Error(w, `{"code":"SYSTEM_ERROR","message":"down"}`, http.StatusServiceUnavailable)
		return
	}
	g.next.ServeHTTP(w, r)
}

// TestKeyFetchDoesNotStallValidCallbacks sends callbacks with random
// serials (unauthenticated: anyone can send them) while the platform
// certificate endpoint is slow, and checks that a callback with the known
// serial is answered while that fetch is still blocked, that concurrent
// unknown serials share one fetch, and that a failed fetch is remembered
// for a while instead of being retried by every forged callback.
func TestKeyFetchDoesNotStallValidCallbacks(t *testing.T) {
	platform, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_900_000_000, 0))
	apiV3 := []byte(wechatpay.DevAPIv3Key)
	sim := paysim.New(paysim.Options{
		MchID: "1900000001", AppID: "wxapp", APIv3Key: apiV3,
		PlatformKey: platform, MerchantPub: &wechatpay.DevMerchantKey().PublicKey, Clock: clk,
	})
	gate := &certGate{next: sim.Handler(), entered: make(chan struct{}, 1)}
	srv := httptest.NewServer(gate)
	t.Cleanup(srv.Close)
	client := wechatpay.NewClient(wechatpay.ClientOptions{
		BaseURL: srv.URL, MchID: "1900000001", AppID: "wxapp", Key: wechatpay.DevMerchantKey(),
		APIv3Key: apiV3, Clock: clk,
	})
	l := &ledger{placed: map[string]int64{"O-1": 1000, "O-2": 1000}, paid: map[string]string{}}
	h := paynotify.NewHandler(paynotify.Options{
		Keys: wechatpay.NewPlatformKeys(client.PlatformKeys, clk), APIv3Key: apiV3, Reconciler: l, Clock: clk,
	})
	notification := func(code, serial string) wechatpay.SignedNotification {
		return buildNotification(t, platform, serial, code, 1000, clk.Now())
	}
	post := func(n wechatpay.SignedNotification) int { return postNotification(h, n) }

	// The first valid callback loads the keys.
	if got := post(notification("O-1", sim.PlatformSerial())); got != http.StatusNoContent {
		t.Fatalf("valid callback = %d, want 204", got)
	}
	if got := gate.fetches.Load(); got != 1 {
		t.Fatalf("fetches after the first callback = %d, want 1", got)
	}

	// Once the refetch interval has passed, a random serial triggers a
	// fetch, which the endpoint now holds.
	clk.Advance(time.Hour)
	release := make(chan struct{})
	gate.mu.Lock()
	gate.hold = release
	gate.mu.Unlock()
	const forged = 20
	var wg sync.WaitGroup
	answers := make(chan int, forged)
	wg.Go(func() { answers <- post(notification("O-2", "RANDOM-0")) })
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the random serial did not trigger a certificate fetch")
	}
	for i := 1; i < forged; i++ {
		wg.Go(func() { answers <- post(notification("O-2", "RANDOM-"+string(rune('A'+i)))) })
	}

	// A callback with the known serial is answered while the fetch is
	// still held.
	valid := make(chan int, 1)
	go func() { valid <- post(notification("O-1", sim.PlatformSerial())) }()
	select {
	case got := <-valid:
		if got != http.StatusNoContent {
			t.Errorf("valid callback during the fetch = %d, want 204", got)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a valid callback waited for the certificate fetch of a random serial")
	}
	select {
	case <-answers:
		t.Fatal("a random-serial callback was answered before the fetch it waits on finished")
	default:
	}
	close(release)
	wg.Wait()
	close(answers)
	for got := range answers {
		if got != http.StatusUnauthorized {
			t.Errorf("random-serial callback = %d, want 401", got)
		}
	}
	if got := gate.fetches.Load(); got != 2 {
		t.Errorf("fetches after %d concurrent random serials = %d, want 2 (collapsed into one)", forged, got)
	}

	// A failed fetch is remembered: forged serials do not hammer the
	// provider while it is down, and valid callbacks still pass.
	clk.Advance(time.Hour)
	gate.mu.Lock()
	gate.hold, gate.failing = nil, true
	gate.mu.Unlock()
	for i := range 10 {
		if got := post(notification("O-2", "DOWN-"+string(rune('A'+i)))); got != http.StatusUnauthorized {
			t.Errorf("random-serial callback while the provider is down = %d, want 401", got)
		}
		if got := post(notification("O-1", sim.PlatformSerial())); got != http.StatusNoContent {
			t.Errorf("valid callback while the provider is down = %d, want 204", got)
		}
	}
	if got := gate.fetches.Load(); got != 3 {
		t.Errorf("fetches after 10 random serials against a failing provider = %d, want 3 (failure remembered)", got)
	}
	if l.paid["O-2"] != "" {
		t.Errorf("O-2 paid by a callback with an unknown serial: %v", l.paid)
	}
}

// TestKeyFetchRetriesAfterFailure checks that a remembered failure expires.
func TestKeyFetchRetriesAfterFailure(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_900_000_000, 0))
	var calls atomic.Int64
	var fail atomic.Bool
	fail.Store(true)
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	keys := wechatpay.NewPlatformKeys(func(context.Context) (map[string]*rsa.PublicKey, error) {
		calls.Add(1)
		if fail.Load() {
			return nil, context.DeadlineExceeded
		}
		return map[string]*rsa.PublicKey{"S1": &key.PublicKey}, nil
	}, clk)
	ctx := context.Background()
	for range 5 {
		if _, err := keys.Key(ctx, "S1"); err == nil {
			t.Fatal("Key(S1) with a failing provider = nil error")
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("fetches = %d, want 1 while the failure is remembered", got)
	}
	fail.Store(false)
	clk.Advance(time.Minute)
	if _, err := keys.Key(ctx, "S1"); err != nil {
		t.Fatalf("Key(S1) after the failure expired = %v", err)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("fetches = %d, want 2", got)
	}
}
