package testenv

import (
	"path/filepath"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/testcerts"
)

// Certs are PEM files of a test's own certificate authority: a server
// certificate for 127.0.0.1 and localhost and a client certificate, both
// signed by it.
type Certs struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewCerts writes a fresh CA and the certificates it signs to a
// temporary folder.
func NewCerts(t testing.TB) Certs {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "orderflow test CA")
	c := Certs{CA: filepath.Join(dir, "ca.pem")}
	testcerts.Write(t, c.CA, ca.PEM)
	c.ServerCert, c.ServerKey = ca.Issue(t, dir, "server")
	c.ClientCert, c.ClientKey = ca.Issue(t, dir, "client")
	return c
}
