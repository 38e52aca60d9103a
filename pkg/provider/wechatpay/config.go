package wechatpay

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/config"
)

// DevAPIv3Key is the development APIv3 key (32 bytes). It is public; set
// ORDERFLOW_PAY_APIV3_KEY in production.
const DevAPIv3Key = "orderflow-dev-apiv3-key-32-bytes"

// Config is the merchant side's provider configuration, shared by the
// reconciler (which places, queries and closes orders) and the gateway
// (which verifies notifications).
type Config struct {
	// BaseURL is the provider's address.
	BaseURL string `env:"ORDERFLOW_PAY_BASE_URL" envDefault:"http://127.0.0.1:8081" desc:"Payment provider's base URL."`
	// MchID and AppID identify the merchant.
	MchID string `env:"ORDERFLOW_PAY_MCHID" envDefault:"1900000001" desc:"Merchant id at the payment provider."`
	AppID string `env:"ORDERFLOW_PAY_APPID" envDefault:"wxorderflowdev00001" desc:"App id at the payment provider."`
	// APIv3Key decrypts notifications and certificates (32 bytes); unset
	// means DevAPIv3Key in development (CheckEnv).
	APIv3Key config.Secret `env:"ORDERFLOW_PAY_APIV3_KEY" desc:"APIv3 key that decrypts the provider's notifications and certificates." range:"32 bytes" prod:"required, not the development key"`
	// MerchantKeyFile is the merchant's RSA private key (PEM). Empty uses
	// the repository's public dev key.
	MerchantKeyFile string `env:"ORDERFLOW_PAY_MERCHANT_KEY_FILE" desc:"Merchant's RSA private key (PEM) that signs requests to the provider (empty: the repository's development key)." prod:"required, readable, not the development key"`
	// MerchantSerial is the merchant certificate's serial number; empty
	// derives one from the key.
	MerchantSerial string `env:"ORDERFLOW_PAY_MERCHANT_SERIAL" desc:"Merchant certificate's serial number (empty: derived from the key)."`
	// PublicKeyFile is the WeChat Pay public key (PEM) and PublicKeyID its
	// id (PUB_KEY_ID_…), as downloaded from the merchant platform: the
	// public-key mode of merchants who cannot call /v3/certificates. Set
	// both or neither.
	PublicKeyFile string `env:"ORDERFLOW_PAY_PUBLIC_KEY_FILE" desc:"WeChat Pay public key (PEM) for the public-key mode." range:"set with PUBLIC_KEY_ID"`
	PublicKeyID   string `env:"ORDERFLOW_PAY_PUBLIC_KEY_ID" desc:"Id of that public key (PUB_KEY_ID_…)." range:"set with PUBLIC_KEY_FILE"`
	// PlatformKeyFile is the platform's certificate or public key (PEM),
	// answering only its own serial. With neither it nor PublicKeyFile set
	// the keys are fetched from the provider's GET /v3/certificates.
	PlatformKeyFile string `env:"ORDERFLOW_PAY_PLATFORM_KEY_FILE" desc:"Provider's platform certificate or public key (PEM); with neither it nor PUBLIC_KEY_FILE keys come from GET /v3/certificates."`
	// NotifyURL is where the provider sends payment notifications.
	NotifyURL string `env:"ORDERFLOW_PAY_NOTIFY_URL" envDefault:"http://127.0.0.1:8080/v1/payments/notify" desc:"Where the provider sends payment notifications (the gateway's notify endpoint)."`
	// Timeout bounds one call to the provider.
	Timeout time.Duration `env:"ORDERFLOW_PAY_TIMEOUT" envDefault:"5s" desc:"Bound of one call to the payment provider."`
}

// Validate checks the APIv3 key length.
func (c Config) Validate() error {
	if len(c.APIv3Key.Reveal()) != APIv3KeySize {
		return fmt.Errorf("ORDERFLOW_PAY_APIV3_KEY must be %d bytes", APIv3KeySize)
	}
	if c.BaseURL == "" || c.MchID == "" {
		return errors.New("ORDERFLOW_PAY_BASE_URL and ORDERFLOW_PAY_MCHID are required")
	}
	if (c.PublicKeyFile == "") != (c.PublicKeyID == "") {
		return errors.New("ORDERFLOW_PAY_PUBLIC_KEY_FILE and ORDERFLOW_PAY_PUBLIC_KEY_ID must be set together")
	}
	if c.PublicKeyID != "" && !strings.HasPrefix(c.PublicKeyID, PublicKeyIDPrefix) || c.PublicKeyID == PublicKeyIDPrefix {
		return fmt.Errorf("ORDERFLOW_PAY_PUBLIC_KEY_ID must look like %s… (got %q)", PublicKeyIDPrefix, c.PublicKeyID)
	}
	return nil
}

// ProviderKeys returns the configured provider keys: the WeChat Pay public
// key under its id and/or the platform key file under its serial (both
// during a move from certificates to the public key). It returns nil when
// neither is set: the client then fetches platform certificates.
func (c Config) ProviderKeys() (KeySource, error) {
	var sources CombinedKeys
	if c.PublicKeyFile != "" {
		pub, err := ReadPublicKeyFile(c.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("ORDERFLOW_PAY_PUBLIC_KEY_FILE: %w", err)
		}
		sources = append(sources, StaticKeys{c.PublicKeyID: pub})
	}
	if c.PlatformKeyFile != "" {
		serial, pub, err := ReadPlatformKeyFile(c.PlatformKeyFile)
		if err != nil {
			return nil, fmt.Errorf("ORDERFLOW_PAY_PLATFORM_KEY_FILE: %w", err)
		}
		sources = append(sources, StaticKeys{serial: pub})
	}
	switch len(sources) {
	case 0:
		return nil, nil
	case 1:
		return sources[0], nil
	}
	return sources, nil
}

// NewClient builds the merchant client, logging a warning when it signs
// with the public dev key.
func (c Config) NewClient(log *slog.Logger, clk clock.Clock) (*Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var key *rsa.PrivateKey
	if c.MerchantKeyFile == "" {
		log.Warn("signing provider requests with the public dev merchant key; set ORDERFLOW_PAY_MERCHANT_KEY_FILE in production")
		key = DevMerchantKey()
	} else {
		var err error
		if key, err = ReadPrivateKeyFile(c.MerchantKeyFile); err != nil {
			return nil, err
		}
	}
	keys, err := c.ProviderKeys()
	if err != nil {
		return nil, err
	}
	return NewClient(ClientOptions{
		BaseURL: c.BaseURL, MchID: c.MchID, AppID: c.AppID,
		Key: key, SerialNo: c.MerchantSerial, APIv3Key: []byte(c.APIv3Key.Reveal()),
		Keys: keys, HTTPClient: NewHTTPClient(c.Timeout), Clock: clk,
	}), nil
}
