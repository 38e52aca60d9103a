package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/splitworker/internal/app"
)

// TestStartKeepsTheOperatorsSettings: N and a weight an operator set on
// the admin port stay when another split-worker starts with the
// configured ones (an autoscaler adding a pod must not end a pause).
func TestStartKeepsTheOperatorsSettings(t *testing.T) {
	cfg := apptest.Defaults[app.Config](t)
	_, prefix := testenv.Redis(t)
	cfg.HTTPAddr, cfg.RedisPrefix, cfg.AMQPPrefix = "127.0.0.1:0", prefix, prefix
	cfg.Redis.Addr, cfg.AMQP.URL = testenv.RedisAddr(), config.Secret(testenv.AMQPURL())
	cfg.FulfilmentSlots, cfg.FairnessWeights = 4, map[string]int{"m-1": 2}
	testenv.SplitJobQueues(t, prefix)
	first := "http://" + apptest.Start(t, app.Run, cfg).HTTP
	admin, err := auth.Issue(auth.Config{Secret: []byte(auth.DevJWTSecret)}, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}

	put := func(base, path, body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("PUT %s %s = %d, want 204", path, body, resp.StatusCode)
		}
	}
	type state struct {
		Capacity int
		Weight   int
	}
	slots := func(base string) state {
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
			Groups   []struct {
				Group  string `json:"group"`
				Weight int    `json:"weight"`
			} `json:"groups"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
			t.Fatal(err)
		}
		s := state{Capacity: snap.Capacity, Weight: 1}
		for _, g := range snap.Groups {
			if g.Group == "m-1" {
				s.Weight = g.Weight
			}
		}
		return s
	}
	if got, want := slots(first), (state{4, 2}); got != want {
		t.Fatalf("/slots after the first start = %+v, want the configured %+v", got, want)
	}
	put(first, "/slots/capacity", `{"capacity":0}`)
	put(first, "/slots/weights", `{"group":"m-1","weight":5}`)

	second := "http://" + apptest.Start(t, app.Run, cfg).HTTP
	if got, want := slots(second), (state{0, 5}); got != want {
		t.Errorf("/slots after a second start with N=4, m-1=2 = %+v, want the operator's %+v", got, want)
	}
}
