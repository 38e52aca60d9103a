// Command commitlint fails when a commit after a base commit has a message
// out of form (pkg/testkit/commitlint): a subject over 72 characters or
// ending with a period, or no blank line before the body. Merge commits
// are skipped. `make lint` runs it with COMMITLINT_BASE.
//
//	commitlint -base 8ff55ad [-head HEAD] [-C dir]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/orderflow/orderflow/pkg/testkit/commitlint"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "commitlint:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("commitlint", flag.ContinueOnError)
	base := fs.String("base", "", "check the commits after this one (required)")
	head := fs.String("head", "HEAD", "the last commit to check")
	dir := fs.String("C", ".", "the git repository")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *base == "" {
		return errors.New("-base is required")
	}
	problems, err := commitlint.Range(ctx, *dir, *base, *head)
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d commit message(s) after %s out of form: subject at most %d characters, no trailing period, a blank line before the body", len(problems), *base, commitlint.MaxSubject)
	}
	fmt.Fprintf(stdout, "commit messages after %s: in form\n", *base)
	return nil
}
