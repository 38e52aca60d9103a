package wechatpay

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
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
	BaseURL string `env:"ORDERFLOW_PAY_BASE_URL" envDefault:"http://127.0.0.1:8081"`
	// MchID and AppID identify the merchant.
	MchID string `env:"ORDERFLOW_PAY_MCHID" envDefault:"1900000001"`
	AppID string `env:"ORDERFLOW_PAY_APPID" envDefault:"wxorderflowdev00001"`
	// APIv3Key decrypts notifications and certificates (32 bytes); unset
	// means DevAPIv3Key in development (CheckEnv).
	APIv3Key config.Secret `env:"ORDERFLOW_PAY_APIV3_KEY"`
	// MerchantKeyFile is the merchant's RSA private key (PEM). Empty uses
	// the repository's public dev key.
	MerchantKeyFile string `env:"ORDERFLOW_PAY_MERCHANT_KEY_FILE"`
	// MerchantSerial is the merchant certificate's serial number; empty
	// derives one from the key.
	MerchantSerial string `env:"ORDERFLOW_PAY_MERCHANT_SERIAL"`
	// PlatformKeyFile is the platform's public key or certificate (PEM).
	// Empty fetches the keys from the provider's GET /v3/certificates.
	PlatformKeyFile string `env:"ORDERFLOW_PAY_PLATFORM_KEY_FILE"`
	// NotifyURL is where the provider sends payment notifications.
	NotifyURL string `env:"ORDERFLOW_PAY_NOTIFY_URL" envDefault:"http://127.0.0.1:8080/v1/payments/notify"`
	// Timeout bounds one call to the provider.
	Timeout time.Duration `env:"ORDERFLOW_PAY_TIMEOUT" envDefault:"5s"`
}

// Validate checks the APIv3 key length.
func (c Config) Validate() error {
	if len(c.APIv3Key.Reveal()) != APIv3KeySize {
		return fmt.Errorf("ORDERFLOW_PAY_APIV3_KEY must be %d bytes", APIv3KeySize)
	}
	if c.BaseURL == "" || c.MchID == "" {
		return errors.New("ORDERFLOW_PAY_BASE_URL and ORDERFLOW_PAY_MCHID are required")
	}
	return nil
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
	return NewClient(ClientOptions{
		BaseURL: c.BaseURL, MchID: c.MchID, AppID: c.AppID,
		Key: key, SerialNo: c.MerchantSerial, APIv3Key: []byte(c.APIv3Key.Reveal()),
		HTTPClient: NewHTTPClient(c.Timeout), Clock: clk,
	}), nil
}

// PlatformKeySource returns the platform keys: the configured file (which
// answers only its own serial), or those fetched (lazily, and again for an
// unknown serial) from the provider through client.
func (c Config) PlatformKeySource(client *Client) (KeySource, error) {
	if c.PlatformKeyFile != "" {
		serial, pub, err := ReadPlatformKeyFile(c.PlatformKeyFile)
		if err != nil {
			return nil, err
		}
		return StaticKeys{serial: pub}, nil
	}
	return NewPlatformKeys(client.PlatformKeys, clock.Real{}), nil
}
