package app_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/services/splitworker/internal/app"
)

func TestConfigValidate(t *testing.T) {
	one := func(k, v string) map[string]string { return map[string]string{k: v} }
	apptest.Refuses[app.Config](t, map[string]apptest.Invalid{
		"clock skew in production": {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_SPLITWORKER_CLOCK_SKEW": "20s"}, Names: "ORDERFLOW_SPLITWORKER_CLOCK_SKEW"},
		"prefetch zero":            {Env: one("ORDERFLOW_SPLITWORKER_PREFETCH", "0"), Names: "ORDERFLOW_SPLITWORKER_PREFETCH"},
		"concurrency zero":         {Env: one("ORDERFLOW_SPLITWORKER_CONCURRENCY", "0"), Names: "ORDERFLOW_SPLITWORKER_CONCURRENCY"},
		"delivery limit zero":      {Env: one("ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT", "0"), Names: "ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT"},
		"parcel limit zero":        {Env: one("ORDERFLOW_SPLITWORKER_PARCEL_MAX_GRAMS", "0"), Names: "ORDERFLOW_SPLITWORKER_PARCEL_MAX_GRAMS"},
		"max quantity zero":        {Env: one("ORDERFLOW_SPLITWORKER_MAX_QUANTITY", "0"), Names: "ORDERFLOW_SPLITWORKER_MAX_QUANTITY"},
		"pollers zero":             {Env: one("ORDERFLOW_SPLITWORKER_POLLERS", "0"), Names: "ORDERFLOW_SPLITWORKER_POLLERS"},
		"fulfilment slots zero":    {Env: one("ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS", "0"), Names: "ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS"},
		"fulfilment shards zero":   {Env: one("ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS", "0"), Names: "ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS"},
		"more shards than slots":   {Env: map[string]string{"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS": "4", "ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS": "5"}, Names: "ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS"},
		"slot lease below 1s":      {Env: one("ORDERFLOW_SPLITWORKER_SLOT_LEASE", "500ms"), Names: "ORDERFLOW_SPLITWORKER_SLOT_LEASE"},
		"slot lease < 4 x timeout": {Env: map[string]string{"ORDERFLOW_SPLITWORKER_SLOT_LEASE": "5s", "ORDERFLOW_REDIS_READ_TIMEOUT": "2s"}, Names: "ORDERFLOW_REDIS_READ_TIMEOUT"},
		"task lease below 1s":      {Env: one("ORDERFLOW_SPLITWORKER_LEASE", "500ms"), Names: "ORDERFLOW_SPLITWORKER_LEASE"},
		"lease outlives retries":   {Env: map[string]string{"ORDERFLOW_SPLITWORKER_LEASE": "60s", "ORDERFLOW_SPLITWORKER_LEASE_WAIT": "1s"}, Names: "ORDERFLOW_SPLITWORKER_LEASE_WAIT"},
		"task TTL below 1m":        {Env: one("ORDERFLOW_TASK_TTL", "30s"), Names: "ORDERFLOW_TASK_TTL"},
		"poll max below initial":   {Env: map[string]string{"ORDERFLOW_SPLITWORKER_POLL_INITIAL": "2s", "ORDERFLOW_SPLITWORKER_POLL_MAX": "1s"}, Names: "ORDERFLOW_SPLITWORKER_POLL_INITIAL"},
		"fairness unknown":         {Env: one("ORDERFLOW_SPLITWORKER_FAIRNESS", "members"), Names: "ORDERFLOW_SPLITWORKER_FAIRNESS"},
		"AMQP node not a URL":      {Env: one("ORDERFLOW_AMQP_URL", "amqp://a:5672/,b:5672"), Names: "ORDERFLOW_AMQP_URL"},
		"starve after zero":        {Env: one("ORDERFLOW_SPLITWORKER_STARVE_AFTER", "0"), Names: "ORDERFLOW_SPLITWORKER_STARVE_AFTER"},
		"scrape token reused as the JWT secret": {Env: map[string]string{"ORDERFLOW_ENV": "production",
			"ORDERFLOW_METRICS_TOKEN": "one-value-for-two-credentials-0123456789", "ORDERFLOW_JWT_SECRET": "one-value-for-two-credentials-0123456789"},
			Names: "ORDERFLOW_METRICS_TOKEN and ORDERFLOW_JWT_SECRET hold the same value"},
		"short scrape token":                     {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_METRICS_TOKEN": "short"}, Names: "ORDERFLOW_METRICS_TOKEN"},
		"development scrape token in production": {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_METRICS_TOKEN": "dev-metrics-token"}, Names: "ORDERFLOW_METRICS_TOKEN"},
	})
}
