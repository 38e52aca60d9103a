package config_test

import (
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

func TestEnvSecret(t *testing.T) {
	const dev = "published-dev-value"
	tests := []struct {
		name    string
		env     config.Env
		value   string
		wantErr string // "" = accepted
		want    string // value after the check
	}{
		{"development fills the default", config.Development, "", "", dev},
		{"development keeps a set value", config.Development, "mine", "", "mine"},
		{"production refuses unset", config.Production, "", "X_SECRET is not set", ""},
		{"zero value is production", "", "", "X_SECRET is not set", ""},
		{"production refuses the dev default", config.Production, dev, "X_SECRET is a published development value", dev},
		{"production refuses another dev value", config.Production, "old-dev", "X_SECRET is a published development value", "old-dev"},
		{"production refuses short", config.Production, "short", "X_SECRET must be at least 16 bytes", "short"},
		{"production accepts a strong secret", config.Production, "0123456789abcdef", "", "0123456789abcdef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := config.Secret(tt.value)
			err := tt.env.Secret("X_SECRET", &v, 16, dev, "old-dev")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Secret = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Secret = %v, want %q", err, tt.wantErr)
			}
			if err != nil && tt.value != "" && strings.Contains(err.Error(), tt.value) {
				t.Errorf("error %q reveals the value", err)
			}
			if v.Reveal() != tt.want {
				t.Errorf("value after check = %q, want %q", v.Reveal(), tt.want)
			}
		})
	}
}

func TestLoadEnvParsesAndFlattens(t *testing.T) {
	type cfg struct {
		Env config.Env `env:"ORDERFLOW_ENV" envDefault:"production"`
	}
	c, err := config.LoadEnv[cfg](map[string]string{config.EnvVar: "development"})
	if err != nil || !c.Env.Development() {
		t.Fatalf("LoadEnv(development) = %+v, %v", c, err)
	}
	c, err = config.LoadEnv[cfg](map[string]string{config.EnvVar: ""})
	if err != nil || c.Env.Development() {
		t.Fatalf("LoadEnv(empty) = %+v, %v; want production", c, err)
	}
	if _, err := config.LoadEnv[cfg](map[string]string{config.EnvVar: "staging"}); err == nil || !strings.Contains(err.Error(), "ORDERFLOW_ENV must be production or development") {
		t.Fatalf("LoadEnv(staging) = %v, want the variable named", err)
	}
}

func TestDistinct(t *testing.T) {
	a := config.Named{Name: "A_TOKEN", Value: "same-value"}
	b := config.Named{Name: "B_TOKEN", Value: "same-value"}
	c := config.Named{Name: "C_TOKEN", Value: "other-value"}
	unset := config.Named{Name: "D_TOKEN"}
	tests := []struct {
		name string
		in   []config.Named
		want string // "" = accepted
	}{
		{"all different", []config.Named{a, c}, ""},
		{"two unset", []config.Named{unset, {Name: "E_TOKEN"}}, ""},
		{"one value twice", []config.Named{a, c, b}, "A_TOKEN and B_TOKEN hold the same value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := config.Distinct(tt.in...)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Distinct() = %v, want %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "same-value") {
				t.Errorf("Distinct() = %v reveals the value", err)
			}
		})
	}
}
