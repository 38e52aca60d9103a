// Command smoke runs the orderflow smoke against a running release through
// its gateway: the chart's `helm test` hook runs it in a pod. The JWT
// secret comes from ORDERFLOW_JWT_SECRET (the release's Secret), the
// issuer and audience from ORDERFLOW_JWT_ISSUER / ORDERFLOW_JWT_AUDIENCE.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/smoke"
)

func main() {
	gateway := flag.String("gateway", "http://127.0.0.1:8080", "the gateway's HTTP base URL")
	orderTimeout := flag.Duration("order-timeout", time.Minute, "how long the sample order may take")
	paymentTimeout := flag.Duration("payment-timeout", 2*time.Minute, "how long the unpaid payment may take to close (the reconcile schedule)")
	payment := flag.Bool("payment", true, "also wait for an unpaid payment to be closed (needs a reconcile schedule shorter than -payment-timeout)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	secret := os.Getenv("ORDERFLOW_JWT_SECRET")
	if secret == "" {
		fmt.Fprintln(os.Stderr, "smoke: ORDERFLOW_JWT_SECRET is not set")
		os.Exit(2)
	}
	steps := &smoke.Steps{Out: os.Stdout}
	err := smoke.Run(ctx, steps, smoke.Options{
		Gateway: *gateway, JWTSecret: []byte(secret),
		Issuer: os.Getenv("ORDERFLOW_JWT_ISSUER"), Audience: os.Getenv("ORDERFLOW_JWT_AUDIENCE"),
		RunID:        strconv.FormatInt(time.Now().UnixNano(), 36),
		OrderTimeout: *orderTimeout, PaymentTimeout: *paymentTimeout, SkipPayment: !*payment,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "smoke failed:", err)
		os.Exit(1)
	}
	fmt.Printf("smoke passed in %.1fs\n", steps.Elapsed().Seconds())
}
