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

func TestEnvNames(t *testing.T) {
	type inner struct {
		Addr string `env:"ORDERFLOW_X_ADDR"`
	}
	type cfg struct {
		Inner  inner
		Level  string `env:"ORDERFLOW_X_LEVEL" envDefault:"info"`
		Again  string `env:"ORDERFLOW_X_ADDR"`
		NoTag  string
		Secret config.Secret `env:"ORDERFLOW_X_SECRET"`
	}
	got, err := config.EnvNames[cfg]()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ORDERFLOW_X_ADDR", "ORDERFLOW_X_LEVEL", "ORDERFLOW_X_SECRET"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("EnvNames = %q, want %q", got, want)
	}

	var buf bytes.Buffer
	if ok, err := config.PrintEnvNames[cfg]([]string{"--serve"}, &buf); ok || err != nil || buf.Len() != 0 {
		t.Errorf("PrintEnvNames(--serve) = %v, %v and wrote %q; want false, nil and nothing", ok, err, buf.String())
	}
	if ok, err := config.PrintEnvNames[cfg]([]string{config.EnvNamesArg}, &buf, "ORDERFLOW_LOG_LEVEL"); !ok || err != nil {
		t.Fatalf("PrintEnvNames(%s) = %v, %v; want true, nil", config.EnvNamesArg, ok, err)
	}
	if want := "ORDERFLOW_LOG_LEVEL\nORDERFLOW_X_ADDR\nORDERFLOW_X_LEVEL\nORDERFLOW_X_SECRET\n"; buf.String() != want {
		t.Errorf("PrintEnvNames wrote %q, want %q", buf.String(), want)
	}
}
