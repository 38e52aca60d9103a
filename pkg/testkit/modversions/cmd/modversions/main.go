// Command modversions fails when a dependency is built at two versions:
// by two of the workspace's modules on their own (as their images build
// them, GOWORK=off), or by one of them and the workspace (as the tests
// build it). `make lint` runs it from the repository root.
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
	if len(bad) == 0 {
		fmt.Fprintf(stdout, "dependency versions: one per dependency across go.work and its %d modules\n", len(work.Use))
		return nil
	}
	for _, m := range bad {
		fmt.Fprintln(stdout, m)
	}
	return errors.New("dependencies built at more than one version: require the same version in every module (go get <path>@<version> in each), then go mod tidy")
}
