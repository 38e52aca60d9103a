// Command openapidoc prints the OpenAPI 3.1 document the gateway serves at
// /openapi.json with the default limits of its configuration, for the
// OpenAPI linter that make lint runs.
package main

import (
	"fmt"
	"os"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/rules"
	"github.com/orderflow/orderflow/services/gateway/internal/app"
	"github.com/orderflow/orderflow/services/gateway/internal/openapi"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "openapidoc:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.LoadEnv[app.Config](map[string]string{"ORDERFLOW_ENV": "development"})
	if err != nil {
		return err
	}
	doc, err := openapi.Document(rules.Gateway(rules.NewOrderSplit(int64(cfg.MaxItems), int64(cfg.MaxQuantity))))
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(doc, '\n'))
	return err
}
