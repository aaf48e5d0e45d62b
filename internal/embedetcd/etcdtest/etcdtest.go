// Package etcdtest starts an embedded etcd for one test, on loopback,
// with a client; both end with the test.
package etcdtest

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cdcctl/cdcctl/internal/embedetcd"
)

// Start returns the etcd's endpoint and a client of it.
func Start(t testing.TB) (string, *clientv3.Client) {
	t.Helper()
	srv, err := embedetcd.Start(embedetcd.Config{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv.Endpoint(), cli
}
