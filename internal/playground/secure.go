package playground

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/certs"
	"github.com/cdcctl/cdcctl/internal/embedetcd"
)

// secure is what --secure gives the playground: a private CA and a
// certificate per capture (TLS on the API and the transport, agents
// verifying each other), etcd on TLS asking for the captures'
// certificates, and a token file with an admin and a viewer token.
// Everything lives in DIR/secure.
type secure struct {
	files map[string]certs.Files
	// etcd is the embedded etcd's server certificate: it serves TLS and
	// asks every client for a certificate of the CA (the captures').
	etcd                            certs.Files
	caFile, tokensFile              string
	adminTokenFile, viewerTokenFile string
	adminToken                      string
	pool                            *x509.CertPool
}

// newSecure makes the CA, the captures' certificates and the tokens. A
// directory kept from an earlier run gets new ones: the old agents are
// gone.
func newSecure(dir string, nodes int) (*secure, error) {
	sdir := filepath.Join(dir, "secure")
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return nil, err
	}
	ca, err := certs.NewCA("cdcctl playground CA")
	if err != nil {
		return nil, err
	}
	s := &secure{files: map[string]certs.Files{}, caFile: filepath.Join(sdir, "ca.crt"), tokensFile: filepath.Join(sdir, "tokens.csv"),
		adminTokenFile: filepath.Join(sdir, "admin.token"), viewerTokenFile: filepath.Join(sdir, "viewer.token"), pool: x509.NewCertPool()}
	s.pool.AppendCertsFromPEM(ca.PEM)
	for i := 1; i <= nodes; i++ {
		id := fmt.Sprintf("capture-%d", i)
		if s.files[id], err = ca.WriteAgent(sdir, id, "127.0.0.1", "localhost"); err != nil {
			return nil, err
		}
	}
	if s.etcd, err = ca.WriteAgent(sdir, "etcd", "127.0.0.1", "localhost"); err != nil {
		return nil, err
	}
	admin, viewer := newToken(), newToken()
	s.adminToken = admin
	for _, w := range []struct{ path, body string }{
		{s.tokensFile, "# token,user,role (cdc-agent --token-auth-file)\n" + admin + ",admin,admin\n" + viewer + ",viewer,viewer\n"},
		{s.adminTokenFile, admin + "\n"},
		{s.viewerTokenFile, viewer + "\n"},
	} {
		if err := os.WriteFile(w.path, []byte(w.body), 0o600); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func newToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// agentArgs are a capture's TLS and token flags, and its certificate as
// etcd's client.
func (s *secure) agentArgs(id string) []string {
	f := s.files[id]
	return []string{"--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-file", f.CA, "--token-auth-file", s.tokensFile,
		"--etcd-cacert", f.CA, "--etcd-cert", f.Cert, "--etcd-key", f.Key}
}

// etcdConfig serves the embedded etcd over TLS with client
// certificates when secure.
func (s *secure) etcdConfig(cfg embedetcd.Config) embedetcd.Config {
	if s != nil {
		cfg.CertFile, cfg.KeyFile, cfg.TrustedCAFile = s.etcd.Cert, s.etcd.Key, s.etcd.CA
	}
	return cfg
}

// newClient is the playground's own API client: over TLS with the admin
// token when secure.
func newClient(s *secure, addrs []string, timeout time.Duration) (*api.Client, error) {
	if s == nil {
		return api.NewClient(addrs, timeout)
	}
	c, err := api.NewClient(s.servers(addrs), timeout)
	if err != nil {
		return nil, err
	}
	c.SetTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.pool})
	c.SetToken(s.adminToken)
	return c, nil
}

// servers are the captures' addresses as cdcctl reaches them.
func (s *secure) servers(addrs []string) []string {
	if s == nil {
		return addrs
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = "https://" + a
	}
	return out
}
