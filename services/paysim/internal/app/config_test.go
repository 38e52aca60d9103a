package app_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/services/paysim/internal/app"
)

func TestConfigValidate(t *testing.T) {
	apptest.Refuses[app.Config](t, map[string]apptest.Invalid{
		"APIv3 key not 32 bytes":     {Env: map[string]string{"ORDERFLOW_PAY_APIV3_KEY": "short"}, Names: "ORDERFLOW_PAY_APIV3_KEY"},
		"public key id prefix":       {Env: map[string]string{"ORDERFLOW_PAYSIM_PUBLIC_KEY_ID": "NOT_A_PUB_KEY_ID"}, Names: "ORDERFLOW_PAYSIM_PUBLIC_KEY_ID"},
		"negative minimum close age": {Env: map[string]string{"ORDERFLOW_PAYSIM_MIN_CLOSE_AGE": "-1s"}, Names: "ORDERFLOW_PAYSIM_MIN_CLOSE_AGE"},
	})
}
