package app_test

import (
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/services/splitworker/internal/app"
)

func TestFairnessConfig(t *testing.T) {
	t.Setenv(config.EnvVar, string(config.Development))
	t.Setenv("ORDERFLOW_SPLITWORKER_FAIRNESS_WEIGHTS", "m-1=3,m-2=2")
	t.Setenv("ORDERFLOW_SPLITWORKER_MEMBER_SLOTS", "2")
	cfg, err := config.Load[app.Config]()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.FairnessWeights["m-1"] != 3 || cfg.FairnessWeights["m-2"] != 2 || cfg.MemberSlots != 2 || cfg.Fairness != "member" {
		t.Errorf("config = %+v", cfg)
	}
	for env, bad := range map[string]string{
		"ORDERFLOW_SPLITWORKER_FAIRNESS":         "members",
		"ORDERFLOW_SPLITWORKER_FAIRNESS_WEIGHTS": "m-1=0",
		"ORDERFLOW_SPLITWORKER_STARVE_AFTER":     "0",
		"ORDERFLOW_SPLITWORKER_MEMBER_SLOTS":     "-1",
		"ORDERFLOW_SPLITWORKER_OUTAGE_HOLD":      "30m",
		"ORDERFLOW_SPLITWORKER_JOB_MAX":          "1s",
		"ORDERFLOW_REDIS_SENTINEL_MASTER":        "orderflow", // without ORDERFLOW_REDIS_SENTINEL_ADDRS
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, bad)
			_, err := config.Load[app.Config]()
			if err == nil || !strings.Contains(err.Error(), env) {
				t.Errorf("%s=%s: error %v, want one naming the variable", env, bad, err)
			}
		})
	}
}
