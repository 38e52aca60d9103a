package app_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/services/reconciler/internal/app"
)

func TestConfigValidate(t *testing.T) {
	const reused = "one-value-for-two-credentials-0123456789"
	apptest.Refuses[app.Config](t, map[string]apptest.Invalid{
		"schedule not increasing":             {Env: map[string]string{"ORDERFLOW_RECONCILE_SCHEDULE": "30s,5s"}, Names: "ORDERFLOW_RECONCILE_SCHEDULE"},
		"retry base not positive":             {Env: map[string]string{"ORDERFLOW_RECONCILE_RETRY_BASE": "0s"}, Names: "ORDERFLOW_RECONCILE_RETRY_BASE"},
		"retry max below base":                {Env: map[string]string{"ORDERFLOW_RECONCILE_RETRY_BASE": "2m", "ORDERFLOW_RECONCILE_RETRY_MAX": "1m"}, Names: "ORDERFLOW_RECONCILE_RETRY_MAX"},
		"repair grace not positive":           {Env: map[string]string{"ORDERFLOW_RECONCILE_REPAIR_GRACE": "0s"}, Names: "ORDERFLOW_RECONCILE_REPAIR_GRACE"},
		"concurrency zero":                    {Env: map[string]string{"ORDERFLOW_RECONCILE_CONCURRENCY": "0"}, Names: "ORDERFLOW_RECONCILE_CONCURRENCY"},
		"lease below 1s":                      {Env: map[string]string{"ORDERFLOW_RECONCILE_LEASE": "500ms"}, Names: "ORDERFLOW_RECONCILE_LEASE"},
		"retention within schedule":           {Env: map[string]string{"ORDERFLOW_PAYMENT_RETENTION": "30m"}, Names: "ORDERFLOW_PAYMENT_RETENTION"},
		"clock skew in production":            {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_RECONCILER_CLOCK_SKEW": "20s"}, Names: "ORDERFLOW_RECONCILER_CLOCK_SKEW"},
		"short gateway token":                 {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_GATEWAY_RECONCILER_TOKEN": "short"}, Names: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN"},
		"gateway token missing in production": {Env: map[string]string{"ORDERFLOW_ENV": "production"}, Names: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN is not set"},
		"gateway token reused as the scrape token": {Env: map[string]string{"ORDERFLOW_ENV": "production",
			"ORDERFLOW_GATEWAY_RECONCILER_TOKEN": reused, "ORDERFLOW_METRICS_TOKEN": reused}, Names: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN and ORDERFLOW_METRICS_TOKEN hold the same value"},
		"short scrape token":                     {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_METRICS_TOKEN": "short"}, Names: "ORDERFLOW_METRICS_TOKEN"},
		"development scrape token in production": {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_METRICS_TOKEN": "dev-metrics-token"}, Names: "ORDERFLOW_METRICS_TOKEN"},
	})
}
