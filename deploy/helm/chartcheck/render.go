// Package chartcheck checks the orderflow Helm chart and the service
// Dockerfiles without a cluster or a Docker engine: it runs the pinned helm
// binary (lint, template), decodes every rendered object strictly into the
// Kubernetes API Go types, checks how the objects refer to one another and
// that every workload is hardened, checks Chart.yaml's metadata, and
// parses the Dockerfiles with a small parser of the instructions they use
// (dockerparse.go).
package chartcheck

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// HelmVersion is the helm release the checks are pinned to (the Makefile's
// HELM_VERSION).
const HelmVersion = "v3.22.0"

// ErrNoHelm means the helm binary could not be found.
var ErrNoHelm = errors.New("helm not found: set HELM to the binary or run `make tools` (installs bin/helm " + HelmVersion + ")")

// FindHelm returns the helm binary: $HELM when set, otherwise bin/helm of
// the repository at root.
func FindHelm(root string) (string, error) {
	p := os.Getenv("HELM")
	if p == "" {
		p = filepath.Join(root, "bin", "helm")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoHelm, err)
	}
	return p, nil
}

// Helm runs one helm binary.
type Helm struct {
	// Path is the helm binary.
	Path string
}

// Run runs helm with args and returns its standard output; a failure
// carries the standard error.
func (h Helm) Run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, h.Path, args...)
	// Keep helm away from the user's repositories, plugins and cache.
	tmp := os.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(tmp, "chartcheck-helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(tmp, "chartcheck-helm-config"),
		"HELM_DATA_HOME="+filepath.Join(tmp, "chartcheck-helm-data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.Bytes(), nil
}

// Version returns helm's release: the module version recorded in a binary
// built by `go install helm.sh/helm/v3/cmd/helm@vX`, or else what
// `helm version --short` reports.
func (h Helm) Version(ctx context.Context) (string, error) {
	if bi, err := buildinfo.ReadFile(h.Path); err == nil && strings.HasPrefix(bi.Main.Version, "v") {
		return bi.Main.Version, nil
	}
	out, err := h.Run(ctx, "version", "--short")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// KubeVersion is the Kubernetes version lint and template assume (the
// chart needs 1.30 or later).
const KubeVersion = "1.34.0"

// Lint runs helm lint --strict on chart with the values files and extra
// arguments (e.g. --set).
func (h Helm) Lint(ctx context.Context, chart string, values []string, extra ...string) error {
	args := append([]string{"lint", "--strict", "--kube-version", KubeVersion, chart}, valueArgs(values)...)
	_, err := h.Run(ctx, append(args, extra...)...)
	return err
}

// Template renders chart as release "of" in namespace "orderflow" with the
// values files and extra arguments, and returns the manifests.
func (h Helm) Template(ctx context.Context, chart string, values []string, extra ...string) ([]byte, error) {
	args := append([]string{"template", "of", chart, "--namespace", "orderflow", "--kube-version", KubeVersion}, valueArgs(values)...)
	return h.Run(ctx, append(args, extra...)...)
}

func valueArgs(files []string) []string {
	var args []string
	for _, f := range files {
		args = append(args, "--values", f)
	}
	return args
}
