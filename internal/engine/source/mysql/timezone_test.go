package mysql_test

import (
	"fmt"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
)

// A MariaDB in India's time zone (+05:30, as SYSTEM is on a host in local
// time) is replicated with every TIMESTAMP in UTC: the binary log holds
// seconds since 1970, a SELECT writes them in the session's zone. The
// rows the snapshot copied and those streamed after it reach the sink in
// one text, equal to what verify reads and to the table read in UTC, in
// a table keyed by a TIMESTAMP whose updated and deleted rows stay one
// key each; a DATETIME is as stored.
func TestTimestampsAreWrittenInUTCWhateverTheServersZone(t *testing.T) {
	t.Parallel()
	srv, _ := mysqltest.StartShop(t, "--default-time-zone=+05:30")
	utc := mysqltest.Open(t, srv.DSN("shop")+"?time_zone=%27%2B00%3A00%27")
	base := time.Date(2021, 3, 4, 5, 6, 7, 500e6, time.UTC)
	values := func(from, to int, at time.Time) string {
		var rows []string
		for g := from; g <= to; g++ {
			ts := at.Add(time.Duration(g) * time.Hour).Format("2006-01-02 15:04:05.000")
			rows = append(rows, fmt.Sprintf("('%s', '%s', 0)", ts, ts))
		}
		return strings.Join(rows, ", ")
	}
	mysqltest.Exec(t, utc, `CREATE TABLE ev (at TIMESTAMP(3) PRIMARY KEY, d DATETIME(3), n INT)`,
		"INSERT INTO ev VALUES "+values(0, 299, base))
	tc, _ := followShop(t, srv, "ev", 2)
	mysqltest.Exec(t, utc, "INSERT INTO ev VALUES "+values(1, 20, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
		"UPDATE ev SET n = n + 1 WHERE at < '2021-03-06'",
		"DELETE FROM ev WHERE at = '2021-03-04 07:06:07.500'")

	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.ev"}, time.Now())
	if !rep.OK || rep.Keys != 319 || rep.Duplicates != 0 {
		t.Fatalf("the sink rebuilt against the table: %+v", rep)
	}
	// What verify compared the sink with is the table as read in UTC.
	_, tables, err := up.Snapshot(t.Context(), []string{"shop.ev"})
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]string{}
	for _, r := range tables["shop.ev"] {
		read[*r["at"]] = *r["at"] + "|" + *r["d"] + "|" + *r["n"]
	}
	rows, err := utc.Query("SELECT CONCAT_WS('|', at, d, n) FROM ev")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for ; rows.Next(); n++ {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		at, _, _ := strings.Cut(line, "|")
		if read[at] != line {
			t.Fatalf("verify read %q, the table in UTC is %q", read[at], line)
		}
	}
	if n != 319 || len(read) != n {
		t.Fatalf("%d rows in the table, %d read by verify", n, len(read))
	}
	for _, want := range []string{"2021-03-04 06:06:07.500|2021-03-04 06:06:07.500|1", "2030-01-01 05:00:00.000|2030-01-01 05:00:00.000|0"} {
		at, _, _ := strings.Cut(want, "|")
		if read[at] != want {
			t.Errorf("row at %s is %q, want %q", at, read[at], want)
		}
	}
}
