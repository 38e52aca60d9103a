// Command crdschemas writes the JSON schemas of the custom resources the
// chart renders (ServiceMonitor, PrometheusRule, ScaledObject,
// TriggerAuthentication) into chartcheck's testdata, converted from the
// CustomResourceDefinitions their projects publish in their Go modules at
// the pinned versions below (fetched through the Go module proxy; KEDA
// v2.20.2 as later releases need a newer Go than the workspace pins).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/orderflow/orderflow/deploy/helm/chartcheck"
)

// source is one CustomResourceDefinition inside a pinned Go module.
type source struct {
	module, version, file string
}

var sources = []source{
	{"github.com/prometheus-operator/prometheus-operator", "v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"},
	{"github.com/prometheus-operator/prometheus-operator", "v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"},
	{"github.com/kedacore/keda/v2", "v2.20.2", "config/crd/bases/keda.sh_scaledobjects.yaml"},
	{"github.com/kedacore/keda/v2", "v2.20.2", "config/crd/bases/keda.sh_triggerauthentications.yaml"},
}

func main() {
	out := flag.String("out", chartcheck.CRDSchemaDir, "directory to write the schemas into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "crdschemas:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	for _, s := range sources {
		dir, err := moduleDir(s.module, s.version)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(filepath.Join(dir, s.file))
		if err != nil {
			return err
		}
		files, err := chartcheck.ConvertCRD(data)
		if err != nil {
			return fmt.Errorf("%s@%s %s: %w", s.module, s.version, s.file, err)
		}
		for _, f := range files {
			p := filepath.Join(out, f.Path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, f.JSON, 0o644); err != nil {
				return err
			}
			fmt.Printf("%s (from %s@%s)\n", p, s.module, s.version)
		}
	}
	return nil
}

// moduleDir downloads module@version through the module proxy (or finds it
// in the module cache) and returns its directory.
func moduleDir(module, version string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	if m.Error != "" {
		return "", fmt.Errorf("%s@%s: %s", module, version, m.Error)
	}
	return m.Dir, nil
}
