package redisconn_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// startFailFast returns a fail-fast client of addr with a read timeout far
// above budget, its breaker running until the test ends.
func startFailFast(t *testing.T, addr string, budget time.Duration) (*redisconn.Breaker, func(context.Context) error) {
	t.Helper()
	rdb, b := redisconn.NewFailFast(redisconn.Config{Addr: addr, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 8},
		budget, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { b.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); rdb.Close() })
	_, prefix := testenv.Redis(t)
	key := prefix + ":failfast"
	return b, func(ctx context.Context) error { return rdb.Incr(ctx, key).Err() }
}

// TestSilentRedisFailsFastUntilAPingIsAnswered blackholes the client's
// Redis (connections stay open, nothing is forwarded): a command fails
// once the budget is spent, not after the read timeout; a caller that gave
// up first does not open the breaker; once a command has run out of the
// budget and a ping has gone unanswered, commands fail at once with
// ErrNotAnswering, and when Redis answers again a ping lets them through.
func TestSilentRedisFailsFastUntilAPingIsAnswered(t *testing.T) {
	toxic, err := netfault.NewToxic(testenv.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(toxic.Close)
	budget := 300 * time.Millisecond
	b, incr := startFailFast(t, toxic.Addr(), budget)
	if err := incr(context.Background()); err != nil {
		t.Fatalf("INCR before the outage = %v", err)
	}
	if err := toxic.Blackhole(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = incr(ctx)
	cancel()
	if err == nil || b.Open() {
		t.Errorf("INCR whose caller gave up while Redis is silent = %v, breaker open %v; want an error and the breaker closed", err, b.Open())
	}

	start := time.Now()
	err = incr(context.Background())
	if took := time.Since(start); err == nil || errors.Is(err, redisconn.ErrNotAnswering) || took > 4*time.Second {
		t.Errorf("first INCR while Redis is silent = %v after %v, want a time-out after the %v budget (read timeout 5s)", err, took, budget)
	}
	// The breaker opens once a ping has gone unanswered too.
	for deadline := time.Now().Add(5 * time.Second); !b.Open(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("breaker still closed 5 s after a command ran out of its budget while Redis is silent, want open")
		}
	}
	if err := incr(context.Background()); !errors.Is(err, redisconn.ErrNotAnswering) {
		t.Errorf("INCR after a time-out = %v, want ErrNotAnswering", err)
	}

	toxic.Heal()
	deadline := time.Now().Add(10 * time.Second)
	for incr(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("INCR still failing 10 s after Redis answers again (breaker open %v)", b.Open())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRefusedRedisDoesNotOpenTheBreaker: a refused connection fails at
// once by itself; only silence opens the breaker.
func TestRefusedRedisDoesNotOpenTheBreaker(t *testing.T) {
	b, incr := startFailFast(t, fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), 300*time.Millisecond)
	if err := incr(context.Background()); err == nil || errors.Is(err, redisconn.ErrNotAnswering) || b.Open() {
		t.Errorf("INCR with the connection refused = %v, breaker open %v; want the refusal and the breaker closed", err, b.Open())
	}
}
