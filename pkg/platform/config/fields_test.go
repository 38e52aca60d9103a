package config_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// hooked has a test-only knob beside a production setting.
type hooked struct {
	Env  config.Env    `env:"ORDERFLOW_ENV" envDefault:"production" desc:"environment"`
	Addr string        `env:"ORDERFLOW_X_ADDR" envDefault:"127.0.0.1:1" desc:"address"`
	Skew time.Duration `env:"ORDERFLOW_X_CLOCK_SKEW" envDefault:"0s" desc:"clock offset" testonly:"true"`
}

func TestTestOnlySettingsRefusedOutsideDevelopment(t *testing.T) {
	tests := map[string]struct {
		env     map[string]string
		refused bool
	}{
		"production, set":               {map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_X_CLOCK_SKEW": "20s"}, true},
		"production by default, set":    {map[string]string{"ORDERFLOW_X_CLOCK_SKEW": "-1s"}, true},
		"production, default value":     {map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_X_CLOCK_SKEW": "0s"}, false},
		"production, unset":             {map[string]string{"ORDERFLOW_ENV": "production"}, false},
		"development, set":              {map[string]string{"ORDERFLOW_ENV": "development", "ORDERFLOW_X_CLOCK_SKEW": "20s"}, false},
		"production, other setting set": {map[string]string{"ORDERFLOW_ENV": "production", "ORDERFLOW_X_ADDR": "127.0.0.1:2"}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("ORDERFLOW_ENV", "")
			t.Setenv("ORDERFLOW_X_CLOCK_SKEW", "")
			_, err := config.LoadEnv[hooked](tc.env)
			switch {
			case tc.refused && (err == nil || !strings.Contains(err.Error(), "ORDERFLOW_X_CLOCK_SKEW")):
				t.Errorf("LoadEnv(%v) = %v, want an error naming ORDERFLOW_X_CLOCK_SKEW", tc.env, err)
			case !tc.refused && err != nil:
				t.Errorf("LoadEnv(%v) = %v, want nil", tc.env, err)
			}
		})
	}
}

func TestFields(t *testing.T) {
	type inner struct {
		Addrs []string `env:"ORDERFLOW_X_ADDRS" desc:"addresses"`
	}
	type cfg struct {
		Inner  inner
		Secret config.Secret  `env:"ORDERFLOW_X_SECRET" desc:"a secret" prod:"at least 32 bytes"`
		Wait   time.Duration  `env:"ORDERFLOW_X_WAIT" envDefault:"2s" desc:"a wait" range:"≥ 100ms"`
		Skew   time.Duration  `env:"ORDERFLOW_X_CLOCK_SKEW" desc:"an offset" testonly:"true"`
		Rates  map[string]int `env:"ORDERFLOW_X_RATES" envKeyValSeparator:"=" desc:"rates"`
		NoTag  string
	}
	got := config.Fields[cfg]()
	want := []config.Field{
		{Name: "ORDERFLOW_X_ADDRS", Type: "comma-separated strings", Desc: "addresses"},
		{Name: "ORDERFLOW_X_SECRET", Type: "secret", Desc: "a secret", Prod: "at least 32 bytes"},
		{Name: "ORDERFLOW_X_WAIT", Type: "duration", Default: "2s", Desc: "a wait", Range: "≥ 100ms"},
		{Name: "ORDERFLOW_X_CLOCK_SKEW", Type: "duration", Desc: "an offset", TestOnly: true},
		{Name: "ORDERFLOW_X_RATES", Type: "comma-separated string=integer", Desc: "rates"},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(config.Field{})); diff != "" {
		t.Errorf("Fields() mismatch (-want +got):\n%s", diff)
	}

	var buf bytes.Buffer
	if ok, err := config.PrintEnvNames[cfg]([]string{config.ConfigDocArg}, &buf, "ORDERFLOW_LOG_LEVEL"); !ok || err != nil {
		t.Fatalf("PrintEnvNames(%s) = %v, %v; want true, nil", config.ConfigDocArg, ok, err)
	}
	var printed []config.Field
	if err := json.Unmarshal(buf.Bytes(), &printed); err != nil {
		t.Fatalf("PrintEnvNames(%s) wrote %q: %v", config.ConfigDocArg, buf.String(), err)
	}
	want = append(want, config.Field{Name: "ORDERFLOW_LOG_LEVEL"})
	if diff := cmp.Diff(want, printed, cmpopts.IgnoreUnexported(config.Field{})); diff != "" {
		t.Errorf("PrintEnvNames(%s) mismatch (-want +got):\n%s", config.ConfigDocArg, diff)
	}
}
