// Command splitworker consumes split jobs from RabbitMQ, splits each order
// into shipments at the fulfilment system and writes the task's result to
// Redis. It serves /livez, /readyz (/healthz), /metrics and the slot pool
// over HTTP.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/gc"
	"github.com/orderflow/orderflow/pkg/platform/logging"
	"github.com/orderflow/orderflow/pkg/platform/telemetry"
	"github.com/orderflow/orderflow/services/splitworker/internal/app"
)

func main() {
	gc.Tune()
	if ok, err := config.PrintEnvNames[app.Config](os.Args[1:], os.Stdout, logging.LevelEnv); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	log := logging.New(os.Stdout, logging.LevelFromEnv(), "splitworker")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.Setup(ctx, "splitworker")
	if err != nil {
		log.Error("splitworker stopped", "err", err)
		os.Exit(1)
	}
	defer shutdown(context.Background())
	if err := run(ctx, log); err != nil {
		log.Error("splitworker stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger) error {
	cfg, err := config.Load[app.Config]()
	if err != nil {
		return err
	}
	return app.Run(ctx, cfg, log, nil)
}
