package app

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/apptest"
)

func TestConfigValidate(t *testing.T) {
	const reused = "one-value-for-two-credentials-0123456789"
	apptest.Refuses[Config](t, map[string]apptest.Invalid{
		"gateway token missing in production":     {Env: map[string]string{"ORDERFLOW_ENV": "production"}, Names: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN is not set"},
		"development gateway token in production": {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_GATEWAY_RECONCILER_TOKEN": "dev-gateway-reconciler-token"}, Names: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN is a published development value"},
		"gateway token reused as the scrape token": {Env: map[string]string{"ORDERFLOW_ENV": "production",
			"ORDERFLOW_GATEWAY_RECONCILER_TOKEN": reused, "ORDERFLOW_METRICS_TOKEN": reused}, Names: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN and ORDERFLOW_METRICS_TOKEN hold the same value"},
		"gateway token reused as the JWT secret": {Env: map[string]string{"ORDERFLOW_ENV": "production",
			"ORDERFLOW_GATEWAY_RECONCILER_TOKEN": reused, "ORDERFLOW_JWT_SECRET": reused}, Names: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN and ORDERFLOW_JWT_SECRET hold the same value"},
		"short scrape token":                     {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_METRICS_TOKEN": "short"}, Names: "ORDERFLOW_METRICS_TOKEN"},
		"development scrape token in production": {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_METRICS_TOKEN": "dev-metrics-token"}, Names: "ORDERFLOW_METRICS_TOKEN"},
		"dev login in production":                {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_DEV_LOGIN": "true"}, Names: "ORDERFLOW_DEV_LOGIN"},
		"task TTL below 1m":                      {Env: map[string]string{"ORDERFLOW_TASK_TTL": "30s"}, Names: "ORDERFLOW_TASK_TTL"},
		"no items allowed":                       {Env: map[string]string{"ORDERFLOW_GATEWAY_MAX_ITEMS": "0"}, Names: "ORDERFLOW_GATEWAY_MAX_ITEMS"},
		"no quantity allowed":                    {Env: map[string]string{"ORDERFLOW_GATEWAY_MAX_QUANTITY": "0"}, Names: "ORDERFLOW_GATEWAY_MAX_QUANTITY"},
		"body cap below 1 KiB":                   {Env: map[string]string{"ORDERFLOW_GATEWAY_MAX_BODY_BYTES": "100"}, Names: "ORDERFLOW_GATEWAY_MAX_BODY_BYTES"},
		"repair grace below 1s":                  {Env: map[string]string{"ORDERFLOW_GATEWAY_REPAIR_GRACE": "10ms"}, Names: "ORDERFLOW_GATEWAY_REPAIR_GRACE"},
		"audit stream too short":                 {Env: map[string]string{"ORDERFLOW_OPS_AUDIT_MAXLEN": "10"}, Names: "ORDERFLOW_OPS_AUDIT_MAXLEN"},
		"ops sample interval 0":                  {Env: map[string]string{"ORDERFLOW_OPS_SAMPLE_INTERVAL": "0s"}, Names: "ORDERFLOW_OPS_SAMPLE_INTERVAL"},
		"AMQP node list with a gap":              {Env: map[string]string{"ORDERFLOW_AMQP_URL": "amqp://a:5672/,,amqp://b:5672/"}, Names: "ORDERFLOW_AMQP_URL"},
		"AMQP node not a URL":                    {Env: map[string]string{"ORDERFLOW_AMQP_URL": "amqp://a:5672/,http://b/"}, Names: "ORDERFLOW_AMQP_URL"},
		"clock skew in production":               {Env: map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_GATEWAY_CLOCK_SKEW": "20s"}, Names: "ORDERFLOW_GATEWAY_CLOCK_SKEW"},
		"delivery limit zero":                    {Env: map[string]string{"ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT": "0"}, Names: "ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT"},
		"fulfilment shards zero":                 {Env: map[string]string{"ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS": "0"}, Names: "ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS"},
		"identity provider without an audience in production": {Env: map[string]string{"ORDERFLOW_ENV": "production",
			"ORDERFLOW_JWT_OIDC_ISSUER": "https://idp.example"}, Names: "ORDERFLOW_JWT_AUDIENCE"},
		"JWKS without an issuer in production": {Env: map[string]string{"ORDERFLOW_ENV": "production",
			"ORDERFLOW_JWT_JWKS_URL": "https://idp.example/jwks", "ORDERFLOW_JWT_AUDIENCE": "orderflow"}, Names: "ORDERFLOW_JWT_ISSUER"},
	})
}
