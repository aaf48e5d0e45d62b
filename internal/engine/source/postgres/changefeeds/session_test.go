package changefeeds

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A database whose settings write values otherwise than PostgreSQL's
// defaults — dates as 04/03/2021, timestamptz in India's zone, floats
// rounded to 15 digits, bytea escaped, intervals in SQL's style, every
// text in LATIN1, backslashes in string literals as escapes — is
// replicated with each value in one text: the rows copied by the
// snapshot and those streamed after it reach the sink as ISO dates,
// timestamptz in UTC, floats' exact digits, bytea in hex and UTF-8, and
// the sink rebuilt equals the tables read by verify. The table is keyed
// by a timestamptz: a row updated and deleted later is still one key. A
// zone the server does not know is refused at creation, with the fix.
func TestValuesAreWrittenTheSameWhateverTheDatabasesSettings(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartDB(t, "unused")
	ctx := context.Background()
	if _, err := srv.Psql(ctx, "postgres", `CREATE DATABASE odd ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(ctx, "odd", `ALTER DATABASE odd SET DateStyle = 'SQL, DMY';
		ALTER DATABASE odd SET TimeZone = 'Asia/Kolkata';
		ALTER DATABASE odd SET extra_float_digits = 0;
		ALTER DATABASE odd SET bytea_output = 'escape';
		ALTER DATABASE odd SET IntervalStyle = 'sql_standard';
		ALTER DATABASE odd SET standard_conforming_strings = off;
		CREATE TABLE m (at timestamptz PRIMARY KEY, d date, f float8, r float4, b bytea, iv interval, s text, n int4);
		INSERT INTO m SELECT timestamptz '2021-03-04 05:06:07.5+00' + g * interval '1 hour', date '2021-03-04' + g,
			0.1::float8 + 0.2::float8 + g, 0.1::float4 + g, '\x00ff'::bytea || int4send(g), interval '1 day 02:03:04' * g,
			'caf' || chr(233) || g, 0
			FROM generate_series(0, 299) g`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("odd")
	if _, _, err := postgres.Pin(ctx, dsn+"&tables=m&timezone=Mars/Base", "mars", time.Now()); err == nil || !strings.Contains(err.Error(), "pg_timezone_names") {
		t.Fatalf("a zone the server does not know: %v", err)
	}

	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	created := tc.CreateChangefeed("pg", dsn+"&tables=m&chunk-rows=50", "file://"+t.TempDir()+"?flush-interval=100ms", 3)
	if !strings.Contains(created.SourceURI, "timezone=UTC") {
		t.Fatalf("the stored source URI does not fix the zone: %s", postgres.Redact(created.SourceURI))
	}
	// Changes after the snapshot: new rows, updates of copied ones, a
	// delete.
	if _, err := srv.Psql(ctx, "odd", `INSERT INTO m SELECT timestamptz '2030-01-01 00:00:00+00' + g * interval '1.25 s', date '0044-03-15 BC',
			1e300 * g, 3.4e38, decode('deadbeef', 'hex'), interval '-3 years 2 mons 1 day -00:00:01.5', chr(255) || g, 1
			FROM generate_series(1, 50) g;
		UPDATE m SET n = n + 1, s = s || '!' WHERE at < '2021-03-06';
		DELETE FROM m WHERE at = '2021-03-04 07:06:07.5+00'`); err != nil {
		t.Fatal(err)
	}
	tc.WaitSnapshot("pg")
	up, err := postgres.NewTableReader(dsn + "&tables=m")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("pg", up, []string{"public.m"}, time.Now())
	if !rep.OK || rep.Keys != 349 || rep.Duplicates != 0 {
		t.Fatalf("the sink rebuilt against the table: %+v", rep)
	}

	// What verify compared the sink with is the one text: every row as
	// PostgreSQL writes it under its default settings, in UTC and UTF-8.
	_, tables, err := up.Snapshot(ctx, []string{"public.m"})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, r := range tables["public.m"] {
		var vals []string
		for _, col := range []string{"at", "d", "f", "r", "b", "iv", "s", "n"} {
			vals = append(vals, deref(r[col]))
		}
		rows[vals[0]] = strings.Join(vals, "|")
	}
	out, err := srv.Psql(ctx, "odd", `SET DateStyle = ISO; SET TimeZone = UTC; SET extra_float_digits = 1; SET bytea_output = hex;
		SET IntervalStyle = postgres; SET client_encoding = UTF8;
		SELECT concat_ws('|', at, d, f, r, b, iv, s, n) FROM m`)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 349 || len(rows) != 349 {
		t.Fatalf("%d rows upstream, %d read by verify", len(lines), len(rows))
	}
	for _, line := range lines {
		at, _, _ := strings.Cut(line, "|")
		if rows[at] != line {
			t.Fatalf("verify read %q, PostgreSQL's defaults write %q", rows[at], line)
		}
	}
	// And by hand, a row copied then updated, one copied, one streamed.
	for _, want := range []string{
		`2021-03-04 05:06:07.5+00|2021-03-04|0.30000000000000004|0.1|\x00ff00000000|00:00:00|café0!|1`,
		`2021-03-08 09:06:07.5+00|2021-06-12|100.3|100.1|\x00ff00000064|100 days 205:06:40|café100|0`,
		`2030-01-01 00:00:02.5+00|0044-03-15 BC|2e+300|3.4e+38|\xdeadbeef|-2 years -10 mons +1 day -00:00:01.5|ÿ2|1`,
	} {
		at, _, _ := strings.Cut(want, "|")
		if rows[at] != want {
			t.Errorf("row at %s is %q, want %q", at, rows[at], want)
		}
	}
	if _, ok := rows["2021-03-04 07:06:07.5+00"]; ok {
		t.Error("the deleted row is still there")
	}
}

// deref is a value's text, NULL as psql's concat_ws leaves it out: "".
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
