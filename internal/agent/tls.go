package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// tlsConfigs loads --tls-cert-file, --tls-key-file and --tls-ca-file:
// the server side serves the API and the transport over TLS and verifies
// a client certificate when one is presented (agents present theirs;
// cdcctl need not); the client side is what this agent dials other
// agents with (the transport, forwarded writes), presenting its own
// certificate and trusting only the CA. Without them both are nil.
func (c *Config) tlsConfigs() (server, client *tls.Config, err error) {
	if c.TLSCertFile == "" && c.TLSKeyFile == "" && c.TLSCAFile == "" {
		return nil, nil, nil
	}
	if c.TLSCertFile == "" || c.TLSKeyFile == "" || c.TLSCAFile == "" {
		return nil, nil, errors.New("TLS needs --tls-cert-file, --tls-key-file and --tls-ca-file together (agents verify each other with the CA)")
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
	}
	pool, err := loadCA(c.TLSCAFile)
	if err != nil {
		return nil, nil, err
	}
	server = &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven,
		NextProtos: []string{"h2", "http/1.1"},
	}
	client = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool}
	return server, client, nil
}

// loadCA reads a PEM file of CA certificates.
func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca-file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// etcdTLS loads --etcd-cacert, --etcd-cert and --etcd-key (etcdctl's
// names): nil without them.
func (c *Config) etcdTLS() (*tls.Config, error) {
	if c.EtcdCACert == "" && c.EtcdCert == "" && c.EtcdKey == "" {
		return nil, nil
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.EtcdCACert != "" {
		pem, err := os.ReadFile(c.EtcdCACert)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cacert: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-cacert %s holds no PEM certificate", c.EtcdCACert)
		}
	}
	if c.EtcdCert != "" {
		cert, err := tls.LoadX509KeyPair(c.EtcdCert, c.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// etcdClient connects to etcd with --etcd-cacert/--etcd-cert/--etcd-key
// and --etcd-user/--etcd-password; a refused login names the flags.
func (c *Config) etcdClient(endpoints []string, dial ...grpc.DialOption) (*clientv3.Client, error) {
	etcdTLS, err := c.etcdTLS()
	if err != nil {
		return nil, usageError{err}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: etcdTLS,
		Username: c.EtcdUser, Password: c.EtcdPassword, DialOptions: dial})
	if err != nil {
		if c.EtcdUser != "" && strings.Contains(err.Error(), "authentication failed") {
			return nil, fmt.Errorf("etcd at %v refused the login of --etcd-user %s: check --etcd-user and --etcd-password (or CDC_AGENT_ETCD_PASSWORD)", endpoints, c.EtcdUser)
		}
		return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	return cli, nil
}
