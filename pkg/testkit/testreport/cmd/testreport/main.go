// Command testreport reads `go test -json` on standard input (or -in),
// copies it to -out, prints build errors, failing tests' output and one
// line per package as it goes, and at the end the -slowest packages.
// `make test` pipes its go test run through it into .cache/test.json.
//
//	go test -json ./... | testreport -out .cache/test.json -slowest 10
//	testreport -in .cache/test.json -slowest 10
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/orderflow/orderflow/pkg/testkit/testreport"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("testreport", flag.ContinueOnError)
	in := fs.String("in", "", "read the events from this file instead of standard input")
	out := fs.String("out", "", "copy the events to this file")
	slowest := fs.Int("slowest", 10, "print this many of the slowest packages at the end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r := stdin
	if *in != "" {
		f, err := os.Open(*in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	var save *os.File
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		save = f
		r = io.TeeReader(r, f)
	}
	p := testreport.NewPrinter(stdout)
	err := p.Read(r)
	if save != nil {
		if cerr := save.Close(); err == nil {
			err = cerr
		}
	}
	p.PrintSlowest(*slowest)
	return err
}
