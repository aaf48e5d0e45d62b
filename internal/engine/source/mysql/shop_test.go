package mysql_test

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
)

// followShop starts two captures and a changefeed "my" of the shop
// database's tables into a file sink, and waits for its initial
// snapshot: how most engine tests of this package begin. It returns the
// cluster and the sink's directory.
func followShop(t *testing.T, srv *mysqlserver.Server, tables string, partitions int) (*enginetest.Cluster, string) {
	t.Helper()
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	sink := t.TempDir()
	tc.CreateChangefeed("my", "mysql://root@"+srv.Addr()+"/shop?tables="+tables, "file://"+sink+"?flush-interval=100ms", partitions)
	tc.WaitSnapshot("my")
	return tc, sink
}
