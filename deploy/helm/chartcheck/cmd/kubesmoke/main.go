// Command kubesmoke is `make kube-smoke`: the orderflow chart rendered with
// the local profile, started with podman kube play and smoke-tested through
// its pods (see package kubesmoke). Run it from the repository root after
// `make images`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/orderflow/orderflow/deploy/helm/chartcheck"
	"github.com/orderflow/orderflow/deploy/helm/chartcheck/kubesmoke"
)

func main() {
	root := flag.String("root", ".", "the repository root")
	tag := flag.String("tag", "", "the image tag `make images` built (required)")
	values := flag.String("values", "deploy/local/kube-values.yaml", "the local profile's values file")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "the Redis the local profile points the pods at")
	amqpURL := flag.String("amqp", "amqp://guest:guest@127.0.0.1:5672/", "the RabbitMQ the local profile points the pods at")
	ready := flag.Duration("ready-timeout", 90*time.Second, "how long the pods may take to become ready")
	var set multi
	flag.Var(&set, "set", "more helm --set arguments (repeatable)")
	flag.Parse()
	if *tag == "" {
		fmt.Fprintln(os.Stderr, "kubesmoke: -tag is required")
		os.Exit(2)
	}
	helm, err := chartcheck.FindHelm(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubesmoke:", err)
		os.Exit(2)
	}
	start := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = kubesmoke.Run(ctx, kubesmoke.Config{
		Helm:   chartcheck.Helm{Path: helm},
		Podman: kubesmoke.Podman{Path: "podman", ContainersConf: filepath.Join(*root, "deploy/local/containers.conf")},
		Chart:  filepath.Join(*root, "deploy/helm/orderflow"), Values: []string{filepath.Join(*root, *values)},
		Set: set, Tag: *tag, RedisAddr: *redisAddr, AMQPURL: *amqpURL, ReadyTimeout: *ready,
		Out: os.Stdout,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nkube-smoke FAILED:\n%v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kube-smoke passed in %.1fs; nothing left running\n", time.Since(start).Seconds())
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
