package mysql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A position past 1 MiB (40 tables of 1,000 columns: 2.2 MB of JSON) is
// kept compressed, and every reader of a stored position reads it: the
// status, a change of the tables, a re-snapshot (which read its new
// position as plain JSON and failed).
func TestALargePositionIsReadWhereverItIsKept(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	names := mysqltest.WideTables(t, db, 40, 1000)
	mysqltest.Exec(t, db, "CREATE TABLE narrow (id INT PRIMARY KEY)")
	ctx := context.Background()
	stored, pos, err := mysql.Pin(ctx, "mysql://root@"+srv.Addr()+"/shop?tables="+strings.Join(names, ","), "big", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(pos), `"deflate:`) || len(pos) > 512<<10 {
		t.Fatalf("the position of 40 tables of 1,000 columns: %d bytes, %.20s…", len(pos), pos)
	}
	if st, err := mysql.Inspect(ctx, stored, pos); err != nil || !strings.HasPrefix(st.Position, "binlog.") {
		t.Fatalf("the status: %+v, %v", st, err)
	}
	at := model.TsFromTime(time.Now())
	added, err := mysql.Retable(ctx, stored, pos, append(names, "narrow"), at, true)
	if err != nil || !strings.HasPrefix(string(added.Position), `"deflate:`) {
		t.Fatalf("a table added: %.20s…, %v", added.Position, err)
	}
	again, err := mysql.Resnapshot(ctx, stored, added.Position, at+1)
	if err != nil || !strings.HasPrefix(string(again.Position), `"deflate:`) {
		t.Fatalf("a re-snapshot: %.20s…, %v", again.Position, err)
	}
}
