// Package config loads a service's typed configuration from environment
// variables (with defaults and validation) and keeps secrets out of logs.
package config

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

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
	return LoadEnv[T](nil)
}

// LoadEnv is Load with overrides set on top of the process environment
// (tests use it to load a development configuration). Outside
// development it refuses a test-only setting (tag testonly:"true") that
// the environment changes from its default.
func LoadEnv[T any](overrides map[string]string) (T, error) {
	var cfg T
	environ := env.ToMap(os.Environ())
	maps.Copy(environ, overrides)
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: environ}); err != nil {
		return cfg, fmt.Errorf("load config: %w", err)
	}
	var baseline T
	withoutTestOnly := maps.Clone(environ)
	for _, f := range Fields[T]() {
		if f.TestOnly {
			delete(withoutTestOnly, f.Name)
		}
	}
	if err := env.ParseWithOptions(&baseline, env.Options{Environment: withoutTestOnly}); err != nil {
		return cfg, fmt.Errorf("load config: %w", err)
	}
	if err := refuseTestOnly(&cfg, &baseline, environ); err != nil {
		return cfg, err
	}
	if v, ok := any(&cfg).(Validator); ok {
		if err := v.Validate(); err != nil {
			// One line, so a refused start reads as one log line.
			return cfg, fmt.Errorf("invalid configuration: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
		}
	}
	return cfg, nil
}

// EnvNamesArg is the command-line argument with which a service prints the
// names of the environment variables it reads, one per line, and exits
// without starting. Deployment checks (the chart's tests and `make
// kube-smoke`) compare them with the variables a manifest sets, so a
// misspelt name fails there instead of being silently ignored.
const EnvNamesArg = "--env-names"

// EnvNames returns, sorted, the environment variables a T reads: the keys
// of its env struct tags, nested structs included.
func EnvNames[T any]() ([]string, error) {
	var cfg T
	params, err := env.GetFieldParams(&cfg)
	if err != nil {
		return nil, fmt.Errorf("env names: %w", err)
	}
	names := make([]string, 0, len(params))
	for _, p := range params {
		names = append(names, p.Key)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// PrintEnvNames handles EnvNamesArg: when args (the command line after the
// program name) is exactly EnvNamesArg it writes EnvNames of T and the
// extra names read outside T (such as logging.LevelEnv) to w, one per
// line, and reports true. It handles ConfigDocArg the same way, writing
// the Fields of T and the extra names as JSON. Otherwise it does nothing
// and reports false.
func PrintEnvNames[T any](args []string, w io.Writer, extra ...string) (bool, error) {
	if len(args) == 1 && args[0] == ConfigDocArg {
		return true, printFields[T](w, extra)
	}
	if len(args) != 1 || args[0] != EnvNamesArg {
		return false, nil
	}
	names, err := EnvNames[T]()
	if err != nil {
		return true, err
	}
	names = append(names, extra...)
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return true, err
		}
	}
	return true, nil
}
