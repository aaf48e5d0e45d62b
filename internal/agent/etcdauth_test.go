package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cdcctl/cdcctl/internal/certs"
	"github.com/cdcctl/cdcctl/internal/embedetcd"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
)

// Issue 14: an agent reaches an etcd that serves clients over TLS only
// (a client certificate required) and has its own authentication on:
// with --etcd-cacert/--etcd-cert/--etcd-key and --etcd-user/--etcd-password
// it joins and leads; with a wrong password it stops at start, saying
// which flags to check, without the password.
func TestAnAgentUsesAnEtcdWithTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("etcd CA")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.WriteAgent(dir, "etcd", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.WriteAgent(dir, "cdc", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedetcd.Start(embedetcd.Config{Dir: t.TempDir(), NoFsync: true, CertFile: server.Cert, KeyFile: server.Key, TrustedCAFile: server.CA,
		BcryptCost: 4}) // bcrypt's least
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.Endpoint(), "https://") {
		t.Fatalf("the embedded etcd serves %s; want https", srv.Endpoint())
	}
	// Turn etcd's authentication on: a root user, then auth.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	cert, err := tls.LoadX509KeyPair(client.Cert, client.Key)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := admin.UserAdd(ctx, "root", "Etcd-pa55"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	cfg := func(id, password string) Config {
		return Config{NodeID: id, Addr: "127.0.0.1:0", Etcd: []string{srv.Endpoint()}, ClusterID: "secure", DataDir: t.TempDir(), SessionTTL: sessionTTL,
			EtcdCACert: client.CA, EtcdCert: client.Cert, EtcdKey: client.Key, EtcdUser: "root", EtcdPassword: password, LogLevel: "info", LogFormat: "text"}
	}
	log, _ := enginetest.Logger(t)
	n, err := New(cfg("capture-1", "Etcd-pa55"), log)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !n.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not join and lead through etcd with TLS and auth within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}

	bad, err := New(cfg("capture-2", "wrong-Pa55"), log)
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	defer bcancel()
	err = bad.Run(bctx)
	if err == nil || !strings.Contains(err.Error(), "--etcd-password") || strings.Contains(err.Error(), "wrong-Pa55") {
		t.Fatalf("a wrong etcd password: %v; want a refusal naming --etcd-password, without the password", err)
	}
}
