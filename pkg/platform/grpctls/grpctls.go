// Package grpctls configures mutual TLS between orderflow's services on
// their internal gRPC connections (the gateway calling the
// payment-reconciler): each side presents a certificate from the files
// named by ORDERFLOW_GRPC_TLS_CERT_FILE and _KEY_FILE and accepts only a
// peer whose certificate chains to ORDERFLOW_GRPC_TLS_CA_FILE; a server
// further accepts only a client whose certificate names one of the
// callers it serves (see ServerOption). With none of the three set the
// connection is plaintext (a service mesh or a trusted network provides
// transport security instead), and the service token still authenticates
// every call.
package grpctls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config names the certificate files; all three or none.
type Config struct {
	// CertFile and KeyFile are this service's certificate chain and key
	// (PEM).
	CertFile string `env:"ORDERFLOW_GRPC_TLS_CERT_FILE" desc:"This service's certificate chain (PEM) for mutual TLS between gateway and reconciler." range:"set with KEY_FILE and CA_FILE"`
	KeyFile  string `env:"ORDERFLOW_GRPC_TLS_KEY_FILE" desc:"This service's private key (PEM) for mutual TLS." range:"set with CERT_FILE and CA_FILE"`
	// CAFile holds the CA certificates (PEM) a peer's certificate must
	// chain to.
	CAFile string `env:"ORDERFLOW_GRPC_TLS_CA_FILE" desc:"CA certificates (PEM) the peer's certificate must chain to." range:"set with CERT_FILE and KEY_FILE"`
	// ServerName is the name a client expects in the server's certificate
	// (empty: the host of the address dialled).
	ServerName string `env:"ORDERFLOW_GRPC_TLS_SERVER_NAME" desc:"Name the client expects in the reconciler's certificate (empty: the host dialled)."`
}

// Enabled reports whether mutual TLS is configured.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// Validate requires the three files together, and readable.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return errors.New("ORDERFLOW_GRPC_TLS_CERT_FILE, ORDERFLOW_GRPC_TLS_KEY_FILE and ORDERFLOW_GRPC_TLS_CA_FILE must be set together")
	}
	_, err := c.load()
	return err
}

// load reads the certificate, its key and the CA pool.
func (c Config) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("ORDERFLOW_GRPC_TLS_CERT_FILE/_KEY_FILE: %w", err)
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("ORDERFLOW_GRPC_TLS_CA_FILE: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ORDERFLOW_GRPC_TLS_CA_FILE: no PEM certificate in %s", c.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// ErrNoClientNames is returned by ServerOption when mutual TLS is on and
// no (non-empty) client name is allowed.
var ErrNoClientNames = errors.New("mutual TLS allows no client name")

// ServerOption is the grpc.Creds option of a server that requires every
// client to present a certificate from the CA naming one of clientNames
// (a DNS name of its subject alternative names, or its subject's common
// name), or nil when mutual TLS is off. A certificate from the CA that
// names someone else is refused in the handshake.
func (c Config) ServerOption(clientNames []string) (grpc.ServerOption, error) {
	if !c.Enabled() {
		return nil, nil
	}
	clientNames = slices.DeleteFunc(slices.Clone(clientNames), func(n string) bool { return n == "" })
	if len(clientNames) == 0 {
		return nil, ErrNoClientNames
	}
	cfg, err := c.load()
	if err != nil {
		return nil, err
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		// Runs after the chain was verified, on resumed sessions too.
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return errors.New("no verified client certificate")
		}
		leaf := cs.VerifiedChains[0][0]
		if names(leaf, clientNames) {
			return nil
		}
		return fmt.Errorf("client certificate names %q, none of the allowed callers %q", append([]string{leaf.Subject.CommonName}, leaf.DNSNames...), clientNames)
	}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}

// names reports whether cert names one of allowed: a DNS name of its
// subject alternative names or its subject's common name, compared
// exactly.
func names(cert *x509.Certificate, allowed []string) bool {
	for _, a := range allowed {
		if cert.Subject.CommonName == a || slices.Contains(cert.DNSNames, a) {
			return true
		}
	}
	return false
}

// DialOption is the transport credentials of a client: its certificate,
// and the CA the server's certificate must chain to; plaintext when mutual
// TLS is off.
func (c Config) DialOption() (grpc.DialOption, error) {
	if !c.Enabled() {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg, err := c.load()
	if err != nil {
		return nil, err
	}
	cfg.ServerName = c.ServerName
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}
