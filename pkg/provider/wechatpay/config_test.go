package wechatpay_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
)

const publicKeyID = "PUB_KEY_ID_0119000000012025010100000000000001"

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigValidateKeyModes(t *testing.T) {
	base := wechatpay.Config{BaseURL: "http://x", MchID: "1", APIv3Key: config.Secret(wechatpay.DevAPIv3Key)}
	tests := []struct {
		name    string
		file    string
		id      string
		wantErr string
	}{
		{"certificates", "", "", ""},
		{"public key", "/k.pem", publicKeyID, ""},
		{"file without id", "/k.pem", "", "ORDERFLOW_PAY_PUBLIC_KEY_ID"},
		{"id without file", "", publicKeyID, "ORDERFLOW_PAY_PUBLIC_KEY_FILE"},
		{"id without prefix", "/k.pem", "0119000000012025", "ORDERFLOW_PAY_PUBLIC_KEY_ID must look like PUB_KEY_ID_"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.PublicKeyFile, c.PublicKeyID = tt.file, tt.id
			err := c.Validate()
			if (err != nil) != (tt.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestConfigPublicKeyMode configures the client from
// ORDERFLOW_PAY_PUBLIC_KEY_FILE / _ID against a simulator in the public-key
// mode: answers verify without any certificate fetch, and the same key
// source refuses every other serial.
func TestConfigPublicKeyMode(t *testing.T) {
	platform, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	sim := paysim.New(paysim.Options{
		MchID: "1900000001", AppID: "wxapp", APIv3Key: apiV3Key, PlatformKey: platform,
		MerchantPub: &wechatpay.DevMerchantKey().PublicKey, Clock: clk, PublicKeyID: publicKeyID,
	})
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	cfg := wechatpay.Config{
		BaseURL: srv.URL, MchID: "1900000001", AppID: "wxapp", APIv3Key: config.Secret(wechatpay.DevAPIv3Key),
		PublicKeyFile: writeFile(t, "pub.pem", wechatpay.MarshalPublicKeyPEM(&platform.PublicKey)), PublicKeyID: publicKeyID,
		Timeout: 5 * time.Second,
	}
	client, err := cfg.NewClient(slog.New(slog.DiscardHandler), clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// An error answer is verified too: an unverified one would be
	// RESPONSE_SIGNATURE_INVALID.
	if _, err := client.Query(ctx, "A1"); !wechatpay.IsCode(err, wechatpay.CodeOrderNotExist) {
		t.Fatalf("Query() error = %v, want a verified ORDER_NOT_EXIST", err)
	}
	if _, err := client.Keys().Key(ctx, sim.PlatformSerial()); err == nil {
		t.Error("Key(platform certificate serial) = nil error, want ErrUnknownSerial in the public-key mode")
	}
}

// TestPlatformKeyFileSerial checks that a platform certificate file answers
// only the certificate's serial.
func TestPlatformKeyFileSerial(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(0x5157F09EFDC096DE), Subject: pkix.Name{CommonName: "Tenpay.com Root CA"},
		NotBefore: time.Unix(1_600_000_000, 0), NotAfter: time.Unix(2_000_000_000, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := wechatpay.Config{PlatformKeyFile: writeFile(t, "cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
	keys, err := cfg.ProviderKeys()
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := keys.Key(context.Background(), "5157F09EFDC096DE"); err != nil || !pub.Equal(&key.PublicKey) {
		t.Errorf("Key(certificate serial) = %v, want the certificate's key", err)
	}
	if _, err := keys.Key(context.Background(), "OTHER"); err == nil {
		t.Error("Key(OTHER) = nil error, want ErrUnknownSerial")
	}
}
