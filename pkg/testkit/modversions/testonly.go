package modversions

// The runtime modules (pkg and each service) build the images; the test
// harness, the fault suite and the benchmark reports live in the
// pkg/testkit module and the gateway's browser tests in the
// services/gateway/browser module, whose dependencies (netlink and
// netfilter packages, plot and statistics packages, chromedp) must stay
// out of the runtime modules' go.mod files and out of what their packages
// build. A module nested in a service's directory (services/<name>/<dir>)
// is not a runtime module: no image builds it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// TestkitModule is the module of the test harness: runtime modules
// require it for their tests only.
const TestkitModule = "github.com/orderflow/orderflow/pkg/testkit"

// TestOnly are the test-only modules no runtime module may need, for its
// packages or its tests.
var TestOnly = []string{
	"github.com/Shopify/toxiproxy/v2",
	"github.com/rs/zerolog",
	"github.com/mdlayher/netlink",
	"github.com/ti-mo/netfilter",
	"gonum.org/v1/plot",
	"golang.org/x/perf",
	"github.com/aclements/go-moremath",
	"github.com/chromedp/chromedp",
	"github.com/chromedp/cdproto",
	"github.com/makiuchi-d/gozxing",
}

// Finding is one way a runtime module needs a test-only module.
type Finding struct {
	Module string // the test-only module
	How    string // "go.mod requires it", or the import path that needs it
}

func (f Finding) String() string { return f.Module + ": " + f.How }

// CheckTestOnly returns how the module in directory dir, built on its own
// (GOWORK=off, as its image is), needs one of modules: a requirement in
// its go.mod, a chain of imports from its packages or their tests (go mod
// why), or a package its non-test packages build from the testkit module.
func CheckTestOnly(ctx context.Context, dir string, modules []string) ([]Finding, error) {
	var out []Finding
	edit, err := goCmd(ctx, dir, "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var mod struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(edit, &mod); err != nil {
		return nil, fmt.Errorf("go mod edit -json in %s: %w", dir, err)
	}
	for _, r := range mod.Require {
		if slices.Contains(modules, r.Path) {
			out = append(out, Finding{Module: r.Path, How: "go.mod requires it (" + r.Version + ")"})
		}
	}

	why, err := goCmd(ctx, dir, append([]string{"mod", "why", "-m"}, modules...)...)
	if err != nil {
		return nil, err
	}
	for m, chain := range parseWhy(string(why)) {
		out = append(out, Finding{Module: m, How: "needed by " + strings.Join(chain, " -> ")})
	}

	deps, err := goCmd(ctx, dir, "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{end}}{{.ImportPath}}", "./...")
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(deps)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == TestkitModule {
			out = append(out, Finding{Module: TestkitModule, How: "non-test packages build " + f[1]})
		}
	}
	slices.SortFunc(out, func(a, b Finding) int { return strings.Compare(a.String(), b.String()) })
	return out, sc.Err()
}

// parseWhy reads `go mod why -m` output: for each module the main module
// needs, the import chain from one of its packages.
func parseWhy(out string) map[string][]string {
	needed := map[string][]string{}
	for block := range strings.SplitSeq(strings.TrimSpace(out), "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "# ") || strings.HasPrefix(lines[1], "(") {
			continue
		}
		needed[strings.TrimPrefix(lines[0], "# ")] = lines[1:]
	}
	return needed
}

func goCmd(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("go %s in %s: %w: %s", strings.Join(args, " "), dir, err, ee.Stderr)
		}
		return nil, fmt.Errorf("go %s in %s: %w", strings.Join(args, " "), dir, err)
	}
	return out, nil
}
