// Command modversions fails when a dependency is built at two versions:
// by two of the workspace's modules on their own (as their images build
// them, GOWORK=off), or by one of them and the workspace (as the tests
// build it); and when a runtime module (pkg, services/*) needs a test-only
// module (modversions.TestOnly) through its go.mod, its packages or their
// tests, or builds a testkit package into a non-test package. `make lint`
// runs it from the repository root.
//
//	modversions [-C dir]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/orderflow/orderflow/pkg/testkit/modversions"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modversions:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("modversions", flag.ContinueOnError)
	root := fs.String("C", ".", "the directory holding go.work")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "work", "edit", "-json")
	cmd.Dir = *root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go work edit -json: %w", err)
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		return fmt.Errorf("go work edit -json: %w", err)
	}
	lists := map[string]modversions.BuildList{}
	var patterns []string
	for _, u := range work.Use {
		patterns = append(patterns, u.DiskPath+"/...")
		if lists[u.DiskPath], err = modversions.Load(ctx, filepath.Join(*root, u.DiskPath)); err != nil {
			return err
		}
	}
	if lists["go.work"], err = modversions.Load(ctx, *root, patterns...); err != nil {
		return err
	}
	bad := modversions.Compare(lists)
	for _, m := range bad {
		fmt.Fprintln(stdout, m)
	}
	if len(bad) == 0 {
		fmt.Fprintf(stdout, "dependency versions: one per dependency across go.work and its %d modules\n", len(work.Use))
	}
	found, runtime, err := testOnly(ctx, *root, stdout)
	if err != nil {
		return err
	}
	if found == 0 {
		fmt.Fprintf(stdout, "test-only modules: none needed by the %d runtime modules\n", runtime)
	}
	switch {
	case len(bad) > 0:
		return errors.New("dependencies built at more than one version: require the same version in every module (go get <path>@<version> in each), then go mod tidy")
	case found > 0:
		return errors.New("runtime modules need test-only modules: move the code that imports them into pkg/testkit or a test-only module nested in the service (as services/gateway/browser), then go mod tidy")
	}
	return nil
}

// testOnly prints how each runtime module under root (pkg, services/*)
// needs a test-only module, and returns how many findings there were and
// how many runtime modules it checked. A module nested deeper in a
// service (services/gateway/browser) holds tests only and is not checked.
func testOnly(ctx context.Context, root string, stdout io.Writer) (found, runtime int, err error) {
	mods, err := filepath.Glob(filepath.Join(root, "services", "*", "go.mod"))
	if err != nil {
		return 0, 0, err
	}
	mods = append([]string{filepath.Join(root, "pkg", "go.mod")}, mods...)
	for _, m := range mods {
		dir := filepath.Dir(m)
		if _, err := os.Stat(m); err != nil {
			continue
		}
		runtime++
		fs, err := modversions.CheckTestOnly(ctx, dir, modversions.TestOnly)
		if err != nil {
			return 0, 0, err
		}
		rel, _ := filepath.Rel(root, dir)
		for _, f := range fs {
			fmt.Fprintf(stdout, "%s: %s\n", rel, f)
		}
		found += len(fs)
	}
	return found, runtime, nil
}
