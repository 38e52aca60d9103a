// Package app wires the payment-provider simulator (package paysim): its
// keys, its optional journal and its HTTP server (WeChat Pay API v3 wire
// format, admin API, /stats, /healthz, /metrics).
package app

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/metrics"
	"github.com/orderflow/orderflow/pkg/platform/serve"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/journal"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
)

// Config is the simulator's configuration.
type Config struct {
	Addr        string        `env:"ORDERFLOW_PAYSIM_ADDR" envDefault:"127.0.0.1:8081" desc:"Listen address of the payment provider simulator."`
	NotifyURL   string        `env:"ORDERFLOW_PAYSIM_NOTIFY_URL" envDefault:"http://127.0.0.1:8080/v1/payments/notify" desc:"Where the simulator sends payment notifications."`
	MinCloseAge time.Duration `env:"ORDERFLOW_PAYSIM_MIN_CLOSE_AGE" envDefault:"5m" desc:"Youngest order the simulator lets be closed; a younger one answers ORDER_CLOSE_TOO_EARLY." range:"≥ 0"`
	// PlatformKeyFile is the platform's RSA private key (PEM); empty
	// generates one at start-up (merchants fetch it from /v3/certificates).
	PlatformKeyFile string `env:"ORDERFLOW_PAYSIM_PLATFORM_KEY_FILE" desc:"Platform's RSA private key (PEM) (empty: one generated at start-up)."`
	// PublicKeyID, when set (PUB_KEY_ID_…), runs the WeChat Pay public-key
	// mode: answers and callbacks are signed under this id, merchants get
	// the key from GET /admin/public-key, /v3/certificates answers 404.
	PublicKeyID string `env:"ORDERFLOW_PAYSIM_PUBLIC_KEY_ID" desc:"Runs the public-key mode under this id (PUB_KEY_ID_…): answers are signed under it and /v3/certificates answers 404." range:"PUB_KEY_ID_…"`
	// MerchantPublicKeyFile verifies the merchant's requests (a public key,
	// a certificate, or the merchant's private key of which only the public
	// half is used); empty uses the repository's dev merchant key.
	MerchantPublicKeyFile string        `env:"ORDERFLOW_PAYSIM_MERCHANT_PUBLIC_KEY_FILE" desc:"Key that verifies the merchant's requests (public key, certificate or private key; empty: the development merchant key)."`
	MchID                 string        `env:"ORDERFLOW_PAY_MCHID" envDefault:"1900000001" desc:"Merchant id the simulator accepts."`
	AppID                 string        `env:"ORDERFLOW_PAY_APPID" envDefault:"wxorderflowdev00001" desc:"App id the simulator accepts."`
	APIv3Key              config.Secret `env:"ORDERFLOW_PAY_APIV3_KEY" envDefault:"orderflow-dev-apiv3-key-32-bytes" desc:"APIv3 key with which the simulator encrypts notifications and certificates." range:"32 bytes"`
	// StateFile, when set, journals orders so that a restarted simulator
	// remembers them (as the real provider would).
	StateFile string `env:"ORDERFLOW_PAYSIM_STATE_FILE" desc:"Journal of orders, so that a restarted simulator remembers them (empty: in memory only)."`
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if len(c.APIv3Key.Reveal()) != wechatpay.APIv3KeySize {
		return fmt.Errorf("ORDERFLOW_PAY_APIV3_KEY must be %d bytes", wechatpay.APIv3KeySize)
	}
	if c.PublicKeyID != "" && !strings.HasPrefix(c.PublicKeyID, wechatpay.PublicKeyIDPrefix) {
		return fmt.Errorf("ORDERFLOW_PAYSIM_PUBLIC_KEY_ID must start with %s", wechatpay.PublicKeyIDPrefix)
	}
	if c.MinCloseAge < 0 {
		return errors.New("ORDERFLOW_PAYSIM_MIN_CLOSE_AGE must not be negative")
	}
	return nil
}

// Run serves the payment-provider simulator until ctx ends. ready, when
// not nil, is called with the HTTP address once it listens.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready serve.Ready) error {
	log.Info("starting", "config", cfg) // config.Secret fields marshal masked

	platformKey, err := loadPlatformKey(cfg.PlatformKeyFile, log)
	if err != nil {
		return err
	}
	merchantPub := &wechatpay.DevMerchantKey().PublicKey
	if cfg.MerchantPublicKeyFile != "" {
		if merchantPub, err = wechatpay.ReadPublicKeyFile(cfg.MerchantPublicKeyFile); err != nil {
			// The chart mounts the merchant's private key: its public half
			// verifies the requests.
			priv, perr := wechatpay.ReadPrivateKeyFile(cfg.MerchantPublicKeyFile)
			if perr != nil {
				return err
			}
			merchantPub = &priv.PublicKey
		}
	} else {
		log.Warn("accepting requests signed with the public dev merchant key; set ORDERFLOW_PAYSIM_MERCHANT_PUBLIC_KEY_FILE to use your own")
	}

	reg := metrics.NewRegistry()
	sim := paysim.New(paysim.Options{
		MchID: cfg.MchID, AppID: cfg.AppID, APIv3Key: []byte(cfg.APIv3Key.Reveal()),
		PlatformKey: platformKey, MerchantPub: merchantPub, PublicKeyID: cfg.PublicKeyID,
		NotifyURL: cfg.NotifyURL, MinCloseAge: cfg.MinCloseAge,
		Clock: clock.Real{}, Logger: log, Registerer: reg,
	})
	if cfg.StateFile != "" {
		f, err := journal.Attach(cfg.StateFile, sim)
		if err != nil {
			return err
		}
		defer f.Close()
		log.Info("restored state", "file", cfg.StateFile, "payments", sim.Stats().Payments)
	}
	mux := http.NewServeMux()
	mux.Handle("/", sim.Handler())
	mux.Handle("GET /metrics", metrics.Handler(reg))

	log.Info("platform key ready", "signing_serial", sim.SigningSerial(), "public_key_mode", cfg.PublicKeyID != "")
	return serve.ListenHTTP(ctx, log, cfg.Addr, mux, ready)
}

func loadPlatformKey(path string, log *slog.Logger) (*rsa.PrivateKey, error) {
	if path != "" {
		return wechatpay.ReadPrivateKeyFile(path)
	}
	log.Info("generating a platform key for this run; merchants fetch it from GET /v3/certificates")
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate platform key: %w", err)
	}
	return k, nil
}
