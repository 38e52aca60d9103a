// Command chartreadme is `make chart-readme`: it regenerates the value
// tables of the chart's README (deploy/helm/orderflow/README.md) from
// values.yaml.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/orderflow/orderflow/deploy/helm/chartcheck"
)

func main() {
	chart := flag.String("chart", "deploy/helm/orderflow", "the chart's directory")
	flag.Parse()
	if err := run(*chart); err != nil {
		fmt.Fprintln(os.Stderr, "chartreadme:", err)
		os.Exit(1)
	}
}

func run(chart string) error {
	values, err := os.ReadFile(chart + "/values.yaml")
	if err != nil {
		return err
	}
	table, err := chartcheck.ValuesDoc(values)
	if err != nil {
		return err
	}
	readme, err := os.ReadFile(chart + "/README.md")
	if err != nil {
		return err
	}
	out, err := chartcheck.SpliceValuesDoc(readme, table)
	if err != nil {
		return err
	}
	return os.WriteFile(chart+"/README.md", out, 0o644)
}
