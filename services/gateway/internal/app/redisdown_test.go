package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestSilentRedisAnswers503WithinTheBudget runs the gateway against a
// Redis reached through a proxy that, while blackholed, keeps its
// connections open and forwards nothing (a network dropping packets: no
// reset, no refusal). Submissions and status reads sent then must each be
// answered 503 STORE_UNAVAILABLE within the Redis budget, not after the
// client's 10 s; once Redis is back, the gateway serves again, and retrying
// each refused submission with its request id gives one task per request
// id: nothing accepted is lost or doubled.
func TestSilentRedisAnswers503WithinTheBudget(t *testing.T) {
	toxic, err := netfault.NewToxic(testenv.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(toxic.Close)
	s := startGateway(t, func(c *Config) {
		// The production timeouts: a read waits 2 s, and go-redis would
		// run a command that timed out again on a new connection.
		c.Redis = redisconn.Config{Addr: toxic.Addr(), DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, PoolSize: 32}
	})
	tok := s.token(t, "alice")
	order := func(req string) string {
		return fmt.Sprintf(`{"orderCode":"ORD-%s","requestId":%q,"items":[{"itemCode":"i1","sku":"S","quantity":1}]}`, req, req)
	}
	code, body := s.do(t, "POST", "/v1/order-splits", tok, order("before"))
	if code != http.StatusOK {
		t.Fatalf("POST before the outage = %d %v, want 200", code, body)
	}
	first, _ := body["taskId"].(string)

	if err := toxic.Blackhole(); err != nil {
		t.Fatal(err)
	}
	// A budget, half a budget to undo a create that timed out, and a
	// second for a loaded machine (as the broker's test allows).
	bound := s.cfg.RedisBudget*3/2 + time.Second
	client := &http.Client{Timeout: 10 * time.Second} // the client's patience
	send := func(method, path, body string) (int, map[string]any, time.Duration) {
		req, err := http.NewRequest(method, "http://"+s.addrs.HTTP+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, time.Since(start)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out, time.Since(start)
	}
	var mu sync.Mutex
	var refused []string
	var slowest time.Duration
	// Two rounds: the first meets Redis silent, the second comes after
	// the gateway has seen it time out.
	for round := range 2 {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				req := fmt.Sprintf("r%d-%d", round, i)
				code, body, took := send("POST", "/v1/order-splits", order(req))
				if code != http.StatusServiceUnavailable || reason(body) != apierr.ReasonStoreUnavailable || took > bound {
					t.Errorf("POST %s while Redis is silent = %d %v after %v, want 503 STORE_UNAVAILABLE within %v", req, code, body, took.Round(10*time.Millisecond), bound)
				}
				mu.Lock()
				refused = append(refused, req)
				slowest = max(slowest, took)
				mu.Unlock()
			})
			wg.Go(func() {
				code, body, took := send("GET", "/v1/tasks/"+first, "")
				if code != http.StatusServiceUnavailable || reason(body) != apierr.ReasonStoreUnavailable || took > bound {
					t.Errorf("GET %d.%d while Redis is silent = %d %v after %v, want 503 STORE_UNAVAILABLE within %v", round, i, code, body, took.Round(10*time.Millisecond), bound)
				}
				mu.Lock()
				slowest = max(slowest, took)
				mu.Unlock()
			})
		}
		wg.Wait()
	}

	t.Logf("slowest answer while Redis was silent: %v (budget %v)", slowest.Round(10*time.Millisecond), s.cfg.RedisBudget)
	toxic.Heal()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body, _ := send("GET", "/v1/tasks/"+first, "")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET after Redis is back = %d %v, still not 200 after 15 s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ids := map[string]bool{first: true}
	for _, req := range refused {
		code, body := s.do(t, "POST", "/v1/order-splits", tok, order(req))
		if code != http.StatusOK {
			t.Errorf("POST %s again after Redis is back = %d %v, want 200", req, code, body)
			continue
		}
		ids[body["taskId"].(string)] = true
	}
	code, body = s.do(t, "GET", "/v1/tasks?pageSize=100", tok, "")
	tasks, _ := body["tasks"].([]any)
	if code != http.StatusOK || len(tasks) != len(ids) {
		t.Errorf("GET /v1/tasks after the retries = %d with %d tasks, want 200 with %d (one per request id)", code, len(tasks), len(ids))
	}
}
