package config

import (
	"errors"
	"fmt"
	"slices"
)

// Env is the deployment environment, read from ORDERFLOW_ENV.
type Env string

// The environments. Production is the default: a service started without
// care refuses development secrets instead of running with them.
const (
	Production  Env = "production"
	Development Env = "development"
)

// EnvVar is the variable that selects the environment.
const EnvVar = "ORDERFLOW_ENV"

// UnmarshalText accepts "production", "development" or empty (production).
func (e *Env) UnmarshalText(b []byte) error {
	switch Env(b) {
	case "", Production:
		*e = Production
	case Development:
		*e = Development
	default:
		return fmt.Errorf("%s must be production or development, not %q", EnvVar, b)
	}
	return nil
}

// Development reports whether e is the development environment; anything
// else, including the zero value, is production.
func (e Env) Development() bool { return e == Development }

// TestOnly refuses a fault-injection knob (a skewed clock, say) that is set
// outside development: it exists for the fault suite, never for a real
// deployment.
func (e Env) TestOnly(name string, set bool) error {
	if set && !e.Development() {
		return fmt.Errorf("%s is a fault-injection setting for tests only; it is refused when %s=production", name, EnvVar)
	}
	return nil
}

// Secret checks one secret variable. In development an empty value is
// replaced by devDefault (when not empty) and nothing is refused. In
// production the secret must be set, at least minLen bytes long and none
// of the published development values (devDefault and devValues); the
// error names the variable and never reveals the value.
func (e Env) Secret(name string, value *Secret, minLen int, devDefault string, devValues ...string) error {
	if e.Development() {
		if *value == "" {
			*value = Secret(devDefault)
		}
		return nil
	}
	v := value.Reveal()
	switch {
	case v == "":
		return fmt.Errorf("%s is not set (required when %s=production)", name, EnvVar)
	case v == devDefault || slices.Contains(devValues, v):
		return fmt.Errorf("%s is a published development value; set a secret of your own (%s=production)", name, EnvVar)
	case len(v) < minLen:
		return fmt.Errorf("%s must be at least %d bytes (%s=production)", name, minLen, EnvVar)
	}
	return nil
}

// Named is a secret with the variable it was read from.
type Named struct {
	Name  string
	Value Secret
}

// Distinct refuses two credentials that hold the same value: a value that
// opens two doors lets whoever holds one credential use the other (the
// scraper call the reconciler, say). Unset ones are skipped. The error
// names both variables of each pair and never reveals the value.
func Distinct(secrets ...Named) error {
	var errs []error
	for i, a := range secrets {
		for _, b := range secrets[i+1:] {
			if a.Value != "" && a.Value == b.Value {
				errs = append(errs, fmt.Errorf("%s and %s hold the same value; give each credential its own", a.Name, b.Name))
			}
		}
	}
	return errors.Join(errs...)
}
