package config_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

func TestSecretMaskedInLoggedStruct(t *testing.T) {
	type cfg struct {
		URL  config.Secret
		Addr string
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting",
		"config", cfg{URL: "amqp://guest:hunter2@host/", Addr: "127.0.0.1:1"}, "secret", config.Secret("hunter2"))
	if strings.Contains(buf.String(), "hunter2") {
		t.Errorf("log line %s reveals the secret", buf.String())
	}
	if !strings.Contains(buf.String(), "127.0.0.1:1") {
		t.Errorf("log line %s lost the plain field", buf.String())
	}
}
