package app_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/services/fulfilmentsim/internal/app"
)

func TestConfigValidate(t *testing.T) {
	apptest.Refuses[app.Config](t, map[string]apptest.Invalid{
		"negative capacity":     {Env: map[string]string{"ORDERFLOW_FULFILMENT_CAPACITY": "-1"}, Names: "ORDERFLOW_FULFILMENT_CAPACITY"},
		"negative job minimum":  {Env: map[string]string{"ORDERFLOW_FULFILMENT_JOB_MIN": "-1ms"}, Names: "ORDERFLOW_FULFILMENT_JOB_MIN"},
		"maximum below minimum": {Env: map[string]string{"ORDERFLOW_FULFILMENT_JOB_MIN": "2s", "ORDERFLOW_FULFILMENT_JOB_MAX": "1s"}, Names: "ORDERFLOW_FULFILMENT_JOB_MAX"},
		"error rate below 0":    {Env: map[string]string{"ORDERFLOW_FULFILMENT_ERROR_RATE": "-0.1"}, Names: "ORDERFLOW_FULFILMENT_ERROR_RATE"},
		"error rate above 1":    {Env: map[string]string{"ORDERFLOW_FULFILMENT_ERROR_RATE": "1.5"}, Names: "ORDERFLOW_FULFILMENT_ERROR_RATE"},
	})
}
