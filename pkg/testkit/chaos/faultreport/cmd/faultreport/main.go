// Command faultreport writes the fault-suite result table of
// docs/reliability.md from pkg/testkit/chaos/testdata/latest.json; `make
// docs` runs it from the repository root.
//
//	faultreport [-json pkg/testkit/chaos/testdata/latest.json] [-doc docs/reliability.md] [-check]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/orderflow/orderflow/pkg/testkit/chaos/faultreport"
)

func main() {
	jsonPath := flag.String("json", faultreport.Path, "the recorded rows")
	doc := flag.String("doc", "docs/reliability.md", "the page whose generated table is rewritten")
	check := flag.Bool("check", false, "fail when the table differs instead of rewriting it")
	flag.Parse()
	if err := faultreport.Write(*jsonPath, *doc, *check); err != nil {
		fmt.Fprintln(os.Stderr, "faultreport:", err)
		os.Exit(1)
	}
}
