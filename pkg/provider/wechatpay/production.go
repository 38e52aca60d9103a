package wechatpay

import (
	"errors"
	"fmt"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// CheckEnv applies ORDERFLOW_ENV to the provider secrets. In development
// an unset APIv3 key becomes DevAPIv3Key and an unset merchant key file
// means the public dev key. In production both must be the merchant's
// own: the APIv3 key set, 32 bytes and not the development value, and the
// merchant key file set, readable and not the development key.
func (c *Config) CheckEnv(env config.Env) error {
	errs := []error{env.Secret("ORDERFLOW_PAY_APIV3_KEY", &c.APIv3Key, APIv3KeySize, DevAPIv3Key)}
	if env.Development() {
		return errors.Join(errs...)
	}
	switch {
	case c.MerchantKeyFile == "":
		errs = append(errs, fmt.Errorf("ORDERFLOW_PAY_MERCHANT_KEY_FILE is not set (required when %s=production)", config.EnvVar))
	default:
		key, err := ReadPrivateKeyFile(c.MerchantKeyFile)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("ORDERFLOW_PAY_MERCHANT_KEY_FILE: %w", err))
		case key.Equal(DevMerchantKey()):
			errs = append(errs, fmt.Errorf("ORDERFLOW_PAY_MERCHANT_KEY_FILE is the published development key; use the merchant's own (%s=production)", config.EnvVar))
		}
	}
	return errors.Join(errs...)
}
