package mysql_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A table keyed by a uuid in BINARY(16) (UUID_TO_BIN's form): about one
// key in sixteen holds a zero byte, which the key's encoding once
// refused, so such a row stopped the changefeed; the keys' bytes, not
// UTF-8, crossed the event log's transport as U+FFFD, so a partition on
// another capture than the reader lost or changed their rows (about 7 %
// of them here); and canal-json wrote them as U+FFFD too. Copied in two partitions from the key's index, then
// changed (inserts, updates, deletes of keys with zero bytes among them)
// and split at a key between, the table rebuilt from the sink equals the
// upstream's.
func TestABinaryUUIDKeyedTableReplicates(t *testing.T) {
	t.Parallel()
	srv, db := startShopDB(t)
	execDB(t, db,
		`CREATE TABLE tokens (id BINARY(16) PRIMARY KEY, n INT NOT NULL)`,
		`INSERT INTO tokens SELECT UNHEX(MD5(seq)), seq FROM seq_1_to_3000`,
		// Keys with zero bytes at the start, the middle and the end.
		`INSERT INTO tokens VALUES (UNHEX('00000000000000000000000000000001'), -1), (UNHEX('7f00000000000000000000000000007f'), -2), (UNHEX('ff000000000000000000000000000000'), -3)`)
	var zeros int
	if err := db.QueryRow(`SELECT COUNT(*) FROM tokens WHERE LOCATE(X'00', id) > 0`).Scan(&zeros); err != nil || zeros < 100 {
		t.Fatalf("%d keys hold a zero byte (%v); the test wants many", zeros, err)
	}
	// Into canal-json, whose strings are UTF-8: a binary column's bytes
	// go as ISO-8859-1 characters, as Canal writes them.
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("my", "mysql://root@"+srv.Addr()+"/shop?tables=tokens", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitSnapshot("my")
	execDB(t, db,
		`INSERT INTO tokens SELECT UNHEX(MD5(seq)), seq FROM seq_3001_to_3500`,
		`UPDATE tokens SET n = n + 1000 WHERE n % 7 = 0`,
		`UPDATE tokens SET n = 0 WHERE id = UNHEX('7f00000000000000000000000000007f')`,
		`DELETE FROM tokens WHERE n % 11 = 0`,
		`DELETE FROM tokens WHERE id = UNHEX('00000000000000000000000000000001')`)
	p := tc.PartitionFrom("my", "shop.tokens", "")
	// A split key with a zero byte in it, between the table's keys.
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, p.ID, "\x40\x00", plan.DefaultCosts) })
	execDB(t, db, `UPDATE tokens SET n = n + 1 WHERE n % 5 = 0`, `INSERT INTO tokens VALUES (UNHEX('40000000000000000000000000000000'), 40)`)
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.tokens"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 || rep.Keys < 3000 {
		t.Fatalf("a table keyed by BINARY(16), %d keys with zero bytes: %+v", zeros, rep)
	}
	t.Logf("%d keys, %d with zero bytes, %d events: %+v", rep.Keys, zeros, rep.Events, rep.TableReports)
}
