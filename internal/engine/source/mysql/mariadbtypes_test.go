package mysql_test

import (
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
)

// MariaDB's own types, INET6 (10.5) and UUID (10.7), arrive from the
// binary log as the server shows them.
func TestMariaDBsINET6AndUUIDArriveAsTheServerShowsThem(t *testing.T) {
	t.Parallel()
	for _, meta := range []string{"FULL", "MINIMAL"} {
		t.Run(meta, func(t *testing.T) {
			up := followFrom(t, "addrs", []string{"--binlog-row-metadata=" + meta}, `CREATE TABLE addrs (id INT PRIMARY KEY, ip INET6, u UUID)`)
			exec(t, up.dsn, `INSERT INTO addrs VALUES (1, '::1', '123e4567-e89b-12d3-a456-426655440000'), (2, '::ffff:192.168.0.1', NULL), (3, 'fe80::abcd', '00000000-0000-0000-0000-000000000000'),
				(4, '::', '6ccd780c-baba-1026-9564-5b8c656024db'), (5, '::192.168.0.1', 'f47ac10b-58cc-4372-a567-0e02b2c3d479'), (6, '2001:db8::1:0:0:1', 'ffffffff-ffff-ffff-ffff-ffffffffffff'),
				(7, '1:0:0:2:0:0:0:3', '00000000-0000-1000-8000-000000000000'), (8, '::0.0.1.2', '12345678-9abc-1def-8123-456789abcdef'), (9, 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', NULL)`,
				"UPDATE addrs SET ip = '::ffff:10.0.0.1' WHERE id = 1")
			readAsTheServerShows(t, up, "addrs")
		})
	}
}

// readAsTheServerShows waits until up's reader has read everything, and
// fails t if it holds a table or the table rebuilt from what it read is not
// the table read back.
func readAsTheServerShows(t *testing.T, up upstream, table string) {
	t.Helper()
	waitResolved(t, up.log)
	evs, _, held := up.log.state()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	if got, want := rebuild(evs), selectAll(t, up.dsn, table); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rebuilt %q, read back %q", got, want)
	}
}

// A table keyed by a UUID column, with an INET6 one, copied and streamed
// through the engine while it changes, partitions cut on the key's text:
// the sink rebuilt equals MariaDB's table.
func TestAUUIDKeyedTableReplicates(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db,
		`CREATE TABLE hosts (id UUID PRIMARY KEY, ip INET6, n INT NOT NULL)`,
		`INSERT INTO hosts SELECT UUID(), CONCAT('::ffff:10.0.', seq DIV 250, '.', seq MOD 250), seq FROM seq_1_to_3000`)
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("hosts", "mysql://root@"+srv.Addr()+"/shop?tables=hosts&chunk-rows=200", "file://"+t.TempDir()+"?flush-interval=100ms", 3)
	mysqltest.Exec(t, db,
		`INSERT INTO hosts SELECT UUID(), CONCAT('fe80::', HEX(seq)), seq FROM seq_3001_to_3300`,
		`UPDATE hosts SET ip = '::1', n = n + 10000 WHERE n % 7 = 0`,
		`DELETE FROM hosts WHERE n % 11 = 0`)
	tc.WaitSnapshot("hosts")
	mysqltest.Exec(t, db, `UPDATE hosts SET ip = NULL WHERE n % 5 = 0`)
	up, _, err := mysql.NewTableReader(tc.Changefeed("hosts").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("hosts", up, []string{"shop.hosts"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 || rep.Keys < 2500 {
		t.Fatalf("a table keyed by UUID: %+v", rep)
	}
}
