package changefeeds

import (
	"encoding/hex"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
// of them here); canal-json wrote them as U+FFFD too; and so did etcd's
// JSON the partitions' bounds and copy progress, which are keys: bounds
// of random bytes came back as U+FFFD, and a copy resumed after such a
// key skipped the rest of its range. Copied in four partitions cut at
// such keys, one of them moved in the middle of its copy, then changed
// (inserts, updates, deletes of keys with zero bytes among them) and
// split at a key between, typed in hex, the table rebuilt from the sink
// equals the upstream's, no row twice. Its BIT(16) column goes into
// canal-json as its number (Canal's form) and comes back as its bytes (a
// byte of 0x80 or more was U+FFFD).
func TestABinaryUUIDKeyedTableReplicates(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db,
		`CREATE TABLE tokens (id BINARY(16) PRIMARY KEY, n INT NOT NULL, f BIT(16))`,
		`INSERT INTO tokens SELECT UNHEX(MD5(seq)), seq, seq * 40503 % 65536 FROM seq_1_to_5000`,
		// Keys with zero bytes at the start, the middle and the end.
		`INSERT INTO tokens VALUES (UNHEX('00000000000000000000000000000001'), -1, b'0'), (UNHEX('7f00000000000000000000000000007f'), -2, b'1111111111111111'), (UNHEX('ff000000000000000000000000000000'), -3, NULL)`)
	var zeros int
	if err := db.QueryRow(`SELECT COUNT(*) FROM tokens WHERE LOCATE(X'00', id) > 0`).Scan(&zeros); err != nil || zeros < 100 {
		t.Fatalf("%d keys hold a zero byte (%v); the test wants many", zeros, err)
	}
	// Into canal-json, whose strings are UTF-8: a binary column's bytes
	// go as ISO-8859-1 characters, as Canal writes them.
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("my", "mysql://root@"+srv.Addr()+"/shop?tables=tokens&chunk-rows=10", "file://"+t.TempDir()+"?flush-interval=100ms", 4)
	var bounds []string
	for _, r := range tc.State().Partitions["my"] {
		if r.Route.Span.Start != "" {
			bounds = append(bounds, r.Route.Span.Start)
			if !utf8.ValidString(r.Route.Span.Start) || strings.ContainsRune(r.Route.Span.Start, utf8.RuneError) {
				t.Fatalf("a bound in etcd is %q", r.Route.Span.Start)
			}
		}
	}
	if len(bounds) != 3 {
		t.Fatalf("the table was cut at %d keys, want 3", len(bounds))
	}
	// The second partition, moved once it has copied part of its range:
	// its copy resumes elsewhere after the last key saved in etcd.
	second := tc.PartitionFrom("my", "shop.tokens", model.DecodeKey(model.BytesKeyType, slices.Min(bounds)))
	saved := tc.CopyUnderWay("my", second.ID)
	// What etcd holds is a key of the table, as it was copied.
	after, _ := saved.After()
	if vals, err := model.DecodeKeyValues(model.BytesKeyType, after); err != nil || len(vals[0]) != 16 {
		t.Fatalf("the copy progress in etcd is %q: %q (%v)", after, vals, err)
	} else if n := 0; db.QueryRow("SELECT COUNT(*) FROM tokens WHERE id = X'"+hex.EncodeToString([]byte(vals[0]))+"'").Scan(&n) != nil || n != 1 {
		t.Fatalf("the copy progress in etcd, %s, is no key of the table", model.DecodeKey(model.BytesKeyType, after))
	}
	tc.MoveElsewhere(second.ID)
	t.Logf("moved %s [%s, …) after it had copied through %s", second.ID, model.DecodeKey(model.BytesKeyType, second.Span.Start), model.DecodeKey(model.BytesKeyType, after))
	tc.WaitSnapshot("my")
	mysqltest.Exec(t, db,
		`INSERT INTO tokens SELECT UNHEX(MD5(seq)), seq, seq * 40503 % 65536 FROM seq_5001_to_5500`,
		`UPDATE tokens SET n = n + 1000, f = f ^ 32769 WHERE n % 7 = 0`,
		`UPDATE tokens SET n = 0 WHERE id = UNHEX('7f00000000000000000000000000007f')`,
		`DELETE FROM tokens WHERE n % 11 = 0`,
		`DELETE FROM tokens WHERE id = UNHEX('00000000000000000000000000000001')`)
	p := tc.PartitionFrom("my", "shop.tokens", "")
	// A split key with a zero byte in it, between the table's keys, typed
	// as an operator types it.
	tc.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, p.ID, "0x0400", plan.DefaultCosts) })
	mysqltest.Exec(t, db, `UPDATE tokens SET n = n + 1 WHERE n % 5 = 0`, `INSERT INTO tokens VALUES (UNHEX('40000000000000000000000000000000'), 40, b'1000000000000001')`)
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.tokens"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 || rep.Keys < 5000 {
		t.Fatalf("a table keyed by BINARY(16), %d keys with zero bytes: %+v", zeros, rep)
	}
	t.Logf("%d keys, %d with zero bytes, %d events: %+v", rep.Keys, zeros, rep.Events, rep.TableReports)
}
