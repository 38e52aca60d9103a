// Package tlsconf builds the client TLS configuration of a connection to
// Redis or RabbitMQ from PEM files named in the environment.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files names the PEM files of a client TLS configuration and the
// variables that carry them (for error messages).
type Files struct {
	// CA is the file of the certificates that may sign the server's
	// certificate; empty means the system's roots.
	CA, CAVar string
	// Cert and Key are the client's certificate and key, for servers that
	// require one; both or neither.
	Cert, CertVar string
	Key, KeyVar   string
	// ServerName overrides the name the server's certificate is checked
	// against (the host dialled when empty).
	ServerName string
}

// Set reports whether any file is named.
func (f Files) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Config loads the files into a TLS 1.2+ client configuration. Errors
// name the variable whose file is wrong.
func (f Files) Config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	var errs []error
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", f.CAVar, err))
		default:
			c.RootCAs = x509.NewCertPool()
			if !c.RootCAs.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("%s: no PEM certificate in %s", f.CAVar, f.CA))
			}
		}
	}
	switch {
	case (f.Cert == "") != (f.Key == ""):
		errs = append(errs, fmt.Errorf("%s and %s must be set together", f.CertVar, f.KeyVar))
	case f.Cert != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s / %s: %w", f.CertVar, f.KeyVar, err))
		} else {
			c.Certificates = []tls.Certificate{pair}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}
