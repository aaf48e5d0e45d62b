package changefeeds

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A changefeed whose position holds many columns — 40 tables of a
// thousand, as 3,000 tables of ten would — is created, copies its rows
// and streams: its position (every table's columns, written into etcd
// at every checkpoint) is kept compressed. Before, it made 2.2 MB of
// JSON, and etcd's client refused the changefeed's creation ("trying to
// send message larger than max").
func TestAChangefeedOfManyColumnsKeepsItsPosition(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	names := mysqltest.WideTables(t, db, 40, 1000)
	for _, n := range names {
		mysqltest.Exec(t, db, fmt.Sprintf("INSERT INTO %s (id, measurement_0007) VALUES (1, 7), (2, 8)", n))
	}
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(1)
	tc.CreateChangefeed("my", "mysql://root@"+srv.Addr()+"/shop?tables="+strings.Join(names, ","), "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.WaitSnapshot("my")
	mysqltest.Exec(t, db, "INSERT INTO wide_00 (id, measurement_0999) VALUES (3, 9)", "UPDATE wide_39 SET measurement_0500 = 5 WHERE id = 2")
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, n := range names {
		tables = append(tables, "shop."+n)
	}
	rep := tc.VerifyDatabase("my", up, tables, time.Now())
	if !rep.OK || rep.Duplicates != 0 || rep.Keys != 40*2+1 {
		t.Fatalf("a changefeed of 40 tables of 1,000 columns: %+v", rep)
	}
	if pos := tc.Changefeed("my").Status.SourcePosition; !strings.HasPrefix(string(pos), `"deflate:`) || len(pos) > 512<<10 {
		t.Fatalf("the stored position: %d bytes, %.20s…", len(pos), pos)
	} else {
		t.Logf("the stored position: %d bytes", len(pos))
	}
}
