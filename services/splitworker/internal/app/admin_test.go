package app_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/splitworker/internal/app"
)

// TestAdminMutationsNeedAdmin: every mutation on the split-worker's admin
// port needs a token with the admin role (a service's token is none). Without
// it one request could set N to 0 and fail every order.
func TestAdminMutationsNeedAdmin(t *testing.T) {
	cfg := apptest.Defaults[app.Config](t)
	if host, _, _ := net.SplitHostPort(cfg.HTTPAddr); !net.ParseIP(host).IsLoopback() {
		t.Errorf("default ORDERFLOW_SPLITWORKER_HTTP_ADDR = %q, want a loopback address", cfg.HTTPAddr)
	}
	base := startWorker(t, cfg)
	admin, member := apptest.DevTokens(t)
	otherKey, _ := auth.Issue(auth.Config{Secret: []byte("another-secret-0123456789abcdef!")}, "ops", time.Now(), time.Hour, auth.RoleAdmin)

	put := func(path, bearer, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	capacity := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/slots", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var snap struct {
			Capacity int `json:"capacity"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
			t.Fatal(err)
		}
		return snap.Capacity
	}
	before := capacity()
	mutations := []struct{ path, body string }{
		{"/slots/capacity", `{"capacity":0}`},
		{"/slots/weights", `{"group":"m-1","weight":3}`},
		{"/slots/fairness", `{"groupCap":1}`},
	}
	for _, m := range mutations {
		for name, tc := range map[string]struct {
			bearer string
			want   int
		}{
			"no credentials":         {"", http.StatusUnauthorized},
			"garbage token":          {"not-a-token", http.StatusUnauthorized},
			"admin token, wrong key": {otherKey, http.StatusUnauthorized},
			"member token":           {member, http.StatusForbidden},
		} {
			if got := put(m.path, tc.bearer, m.body); got != tc.want {
				t.Errorf("PUT %s with %s = %d, want %d", m.path, name, got, tc.want)
			}
		}
	}
	if got := capacity(); got != before {
		t.Fatalf("capacity after refused requests = %d, want %d unchanged", got, before)
	}
	if got := put("/slots/capacity", admin, `{"capacity":3}`); got != http.StatusNoContent {
		t.Errorf("PUT capacity with an admin token = %d, want 204", got)
	}
	if got := capacity(); got != 3 {
		t.Errorf("capacity after admin PUT = %d, want 3", got)
	}
	// Admin is for people: a service's token is no admin credential.
	if got := put("/slots/capacity", auth.DevGatewayReconcilerToken, `{"capacity":2}`); got != http.StatusUnauthorized {
		t.Errorf("PUT capacity with a service token = %d, want 401", got)
	}
	if got := capacity(); got != 3 {
		t.Errorf("capacity after a service token's PUT = %d, want 3 unchanged", got)
	}
}

// TestProfilesNeedAdmin: the Go runtime's profiles on the admin port need
// an admin token.
func TestProfilesNeedAdmin(t *testing.T) {
	cfg := apptest.Defaults[app.Config](t)
	admin, member := apptest.DevTokens(t)
	apptest.ProfilesNeedAdmin(t, startWorker(t, cfg), auth.DevGatewayReconcilerToken, admin, member)
}

// startWorker runs the split-worker with cfg on a fresh Redis prefix and
// RabbitMQ queues until the test ends and returns its admin base URL.
func startWorker(t *testing.T, cfg app.Config) string {
	t.Helper()
	_, prefix := testenv.Redis(t)
	cfg.HTTPAddr, cfg.RedisPrefix, cfg.AMQPPrefix = "127.0.0.1:0", prefix, prefix
	cfg.Redis.Addr, cfg.AMQP.URL = testenv.RedisAddr(), config.Secret(testenv.AMQPURL())
	testenv.SplitJobQueues(t, prefix)
	return "http://" + apptest.Start(t, app.Run, cfg).HTTP
}

// TestAdminSlotsOnAShardedPool: with ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS
// the split-worker seeds N over the shards' keys, /slots shows their sums
// and each shard, and a capacity change on the admin port re-splits N.
func TestAdminSlotsOnAShardedPool(t *testing.T) {
	cfg := apptest.Defaults[app.Config](t)
	rdb, prefix := testenv.Redis(t)
	cfg.HTTPAddr, cfg.RedisPrefix, cfg.AMQPPrefix = "127.0.0.1:0", prefix, prefix
	cfg.Redis.Addr, cfg.AMQP.URL = testenv.RedisAddr(), config.Secret(testenv.AMQPURL())
	cfg.FulfilmentSlots, cfg.FulfilmentShards, cfg.MemberSlots = 6, 3, 5
	testenv.SplitJobQueues(t, prefix)
	addrs := apptest.Start(t, app.Run, cfg)
	base := "http://" + addrs.HTTP

	type shard struct {
		Pool     string `json:"pool"`
		Capacity int    `json:"capacity"`
	}
	admin, _ := auth.Issue(auth.Config{Secret: []byte(auth.DevJWTSecret)}, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	slots := func() (capacity, groupCap int, shards []shard) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/slots", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var snap struct {
			Capacity int     `json:"capacity"`
			GroupCap int     `json:"groupCap"`
			Shards   []shard `json:"shards"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
			t.Fatal(err)
		}
		return snap.Capacity, snap.GroupCap, snap.Shards
	}
	capacity, groupCap, shards := slots()
	want := []shard{{prefix + ":fulfilment:s0", 2}, {prefix + ":fulfilment:s1", 2}, {prefix + ":fulfilment:s2", 2}}
	if capacity != 6 || groupCap != 6 || !slices.Equal(shards, want) {
		t.Errorf("/slots = capacity %d, groupCap %d, shards %v; want 6, 3 × ⌈5 ÷ 3⌉ = 6, %v", capacity, groupCap, shards, want)
	}
	if n, err := rdb.Exists(context.Background(), "{"+prefix+":fulfilment}:capacity").Result(); err != nil || n != 0 {
		t.Errorf("the single pool's capacity key exists (%d, %v), want only the shards'", n, err)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/slots/capacity", strings.NewReader(`{"capacity":7}`))
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT /slots/capacity = %d, want 204", resp.StatusCode)
	}
	capacity, _, shards = slots()
	if got := []int{shards[0].Capacity, shards[1].Capacity, shards[2].Capacity}; capacity != 7 || !slices.Equal(got, []int{3, 2, 2}) {
		t.Errorf("/slots after PUT 7 = capacity %d, shards %v; want 7 as 3, 2, 2", capacity, got)
	}
}

// TestReadsNeedCredentials: the split-worker's admin port serves its
// metrics to the scrape token or an admin token and its slot pool's
// snapshot (which names the members holding and waiting for slots) to an
// admin token only; anonymous reads are refused.
func TestReadsNeedCredentials(t *testing.T) {
	const scrape = "scrape-token-for-this-test-0123456789"
	cfg, err := config.LoadEnv[app.Config](map[string]string{
		config.EnvVar: string(config.Development), "ORDERFLOW_METRICS_TOKEN": scrape,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := startWorker(t, cfg)
	admin, member := apptest.DevTokens(t)
	apptest.MetricsNeedCredentials(t, base+"/metrics", scrape, auth.DevGatewayReconcilerToken, admin, member)
	apptest.Access(t, base+"/slots", `"capacity"`, map[string]apptest.Caller{
		"anonymous":        {Token: "", Status: http.StatusUnauthorized},
		"a bad token":      {Token: "not-a-token", Status: http.StatusUnauthorized},
		"a service":        {Token: auth.DevGatewayReconcilerToken, Status: http.StatusUnauthorized},
		"the scrape token": {Token: scrape, Status: http.StatusUnauthorized},
		"a member":         {Token: member, Status: http.StatusForbidden},
		"an admin":         {Token: admin, Status: http.StatusOK},
	})
}
