// Command funclen fails when a Go function outside tests, generated code
// and the test kit is longer than funclen.Max lines. `make lint` runs it
// from the repository root.
//
//	funclen [-C dir]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/orderflow/orderflow/pkg/testkit/funclen"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("funclen", flag.ContinueOnError)
	root := fs.String("C", ".", "the repository root")
	if err := fs.Parse(args); err != nil {
		return err
	}
	long, err := funclen.Long(*root, funclen.Max)
	if err != nil {
		return err
	}
	for _, f := range long {
		fmt.Fprintln(stdout, f)
	}
	if len(long) > 0 {
		return fmt.Errorf("%d functions over %d lines: break them into named steps", len(long), funclen.Max)
	}
	return nil
}
