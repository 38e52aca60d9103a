package serve_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/serve"
)

func TestListenHTTPSignalsReadyAndStops(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) })
	addrc := make(chan serve.Addrs, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve.ListenHTTP(ctx, log, "127.0.0.1:0", h, func(a serve.Addrs) { addrc <- a }) }()

	var a serve.Addrs
	select {
	case a = <-addrc:
	case err := <-errc:
		t.Fatalf("ListenHTTP() = %v before ready", err)
	case <-time.After(5 * time.Second):
		t.Fatal("ready was not called")
	}
	if a.GRPC != "" || strings.HasSuffix(a.HTTP, ":0") {
		t.Fatalf("ready(%+v), want the bound HTTP address only", a)
	}
	resp, err := http.Get("http://" + a.HTTP + "/")
	if err != nil {
		t.Fatalf("GET after ready: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello" {
		t.Errorf("GET / = %q, want %q", body, "hello")
	}
	if !strings.Contains(logs.String(), `"msg":"listening","http":"`+a.HTTP+`"`) {
		t.Errorf("log %s lacks the listening line", logs.String())
	}

	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("ListenHTTP() after cancel = %v, want nil", err)
		}
	case <-time.After(serve.ShutdownTimeout + time.Second):
		t.Fatal("ListenHTTP did not return after cancel")
	}
}

func TestListeningWithoutReady(t *testing.T) {
	var logs bytes.Buffer
	serve.Listening(slog.New(slog.NewJSONHandler(&logs, nil)), nil, serve.Addrs{HTTP: "127.0.0.1:1", GRPC: "127.0.0.1:2"})
	if !strings.Contains(logs.String(), `"http":"127.0.0.1:1","grpc":"127.0.0.1:2"`) {
		t.Errorf("log %s lacks both addresses", logs.String())
	}
}

func TestListenHTTPBadAddress(t *testing.T) {
	called := false
	err := serve.ListenHTTP(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), "256.0.0.1:bad", http.NotFoundHandler(), func(serve.Addrs) { called = true })
	if err == nil || called {
		t.Errorf("ListenHTTP(bad address) = %v, ready called %v; want an error and no ready", err, called)
	}
}
