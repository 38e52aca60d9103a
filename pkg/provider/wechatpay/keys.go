package wechatpay

import (
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	_ "embed" // the dev merchant key
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// devMerchantKeyPEM is a merchant key for local development and tests only.
// It is public (it lives in the repository), so it authenticates nothing:
// production sets ORDERFLOW_PAY_MERCHANT_KEY_FILE.
//
//go:embed testdata/dev_merchant_private_key.pem
var devMerchantKeyPEM []byte

// DevMerchantKey returns the repository's development merchant key. Anyone
// can read it; use it only for local runs and tests.
func DevMerchantKey() *rsa.PrivateKey {
	k, err := ParsePrivateKey(devMerchantKeyPEM)
	if err != nil {
		panic(fmt.Sprintf("wechatpay: embedded dev merchant key: %v", err))
	}
	return k
}

// ParsePrivateKey parses an RSA private key in PEM (PKCS #8 or PKCS #1).
func ParsePrivateKey(data []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("parse private key: no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("parse private key: %T is not RSA", k)
	}
	return rk, nil
}

// ParsePublicKey parses an RSA public key in PEM (PKIX "PUBLIC KEY", PKCS #1
// "RSA PUBLIC KEY", or the public key of a "CERTIFICATE").
func ParsePublicKey(data []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("parse public key: no PEM block")
	}
	var pub any
	var err error
	switch block.Type {
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			pub = cert.PublicKey
		}
	default:
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	rk, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("parse public key: %T is not RSA", pub)
	}
	return rk, nil
}

// ReadPrivateKeyFile reads an RSA private key PEM file.
func ReadPrivateKeyFile(path string) (*rsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	return ParsePrivateKey(data)
}

// ReadPublicKeyFile reads an RSA public key (or certificate) PEM file.
func ReadPublicKeyFile(path string) (*rsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	return ParsePublicKey(data)
}

// ReadPlatformKeyFile reads a platform certificate (or a bare public key)
// PEM file and returns the serial the provider names it by: the
// certificate's serial number in upper-case hex, or KeySerial of a bare
// key.
func ReadPlatformKeyFile(path string) (string, *rsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("read platform key: %w", err)
	}
	pub, err := ParsePublicKey(data)
	if err != nil {
		return "", nil, fmt.Errorf("platform key %s: %w", path, err)
	}
	if block, _ := pem.Decode(data); block != nil && block.Type == "CERTIFICATE" {
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", nil, fmt.Errorf("platform certificate %s: %w", path, err)
		}
		return strings.ToUpper(cert.SerialNumber.Text(16)), pub, nil
	}
	return KeySerial(pub), pub, nil
}

// MarshalPublicKeyPEM encodes pub as a PKIX "PUBLIC KEY" PEM block.
func MarshalPublicKeyPEM(pub *rsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(fmt.Sprintf("wechatpay: marshal RSA public key: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// KeySerial derives a stable serial number for a key (the upper-case hex of
// the first 20 bytes of the SHA-256 of its PKIX encoding), standing in for a
// certificate serial number.
func KeySerial(pub *rsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(fmt.Sprintf("wechatpay: marshal RSA public key: %v", err))
	}
	sum := sha256.Sum256(der)
	return strings.ToUpper(hex.EncodeToString(sum[:20]))
}
