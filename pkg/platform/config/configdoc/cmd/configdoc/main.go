// Command configdoc writes docs/configuration.md from the services'
// configuration structs (see package configdoc); `make docs` runs it from
// the repository root.
//
//	configdoc [-root .] [-check]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/orderflow/orderflow/pkg/platform/config/configdoc"
)

func main() {
	root := flag.String("root", ".", "the repository root (the directory holding go.work)")
	check := flag.Bool("check", false, "fail when the page differs instead of writing it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := configdoc.Write(ctx, *root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}
