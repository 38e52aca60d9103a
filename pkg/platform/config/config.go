// Package config loads a service's typed configuration from environment
// variables (with defaults and validation) and keeps secrets out of logs.
package config

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/caarlos0/env/v11"
)

// Secret is a string that prints and logs masked.
type Secret string

// String masks the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "****"
}

// LogValue masks the secret in slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON masks the secret when a whole configuration struct is
// logged (slog's JSON handler marshals struct values with encoding/json,
// which does not consult LogValue on nested fields).
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// Validator is implemented by configurations that check themselves after
// loading.
type Validator interface {
	Validate() error
}

// Load fills a T from the environment (struct tags of
// github.com/caarlos0/env) and validates it when T implements Validator.
func Load[T any]() (T, error) {
	var cfg T
	if err := env.Parse(&cfg); err != nil {
		return cfg, fmt.Errorf("load config: %w", err)
	}
	if v, ok := any(&cfg).(Validator); ok {
		if err := v.Validate(); err != nil {
			return cfg, fmt.Errorf("validate config: %w", err)
		}
	}
	return cfg, nil
}
