package mysql

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Tables keyed by characters under collations that fold case and pad
// spaces (utf8mb4 and latin1, alone and with an integer), by BIGINT
// UNSIGNED, DECIMAL and temporal columns, are copied in their key's index order: every chunk is a
// range read of the primary key (it was a cast and a sort of the rest of
// the table, every chunk), and partitions cut at byte bounds that are
// no ranges of the index each keep their own rows: every row is copied
// once, inside its span.
func TestACharacterKeyedTableIsCopiedInItsIndexOrder(t *testing.T) {
	t.Parallel()
	const rows, limit = 6_000, 700
	ctx := context.Background()
	conn := keysConn(t,
		`CREATE TABLE c (k VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)`,
		fmt.Sprintf(`INSERT INTO c SELECT CONCAT(ELT(seq %% 6 + 1, 'a', 'B', '~', 'Ä', 'z ', 'ab~'), seq), seq FROM seq_1_to_%d`, rows),
		`CREATE TABLE m (sku VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_swedish_ci, line INT, v INT, PRIMARY KEY (sku, line))`,
		fmt.Sprintf(`INSERT INTO m SELECT CONCAT(ELT(seq %% 3 + 1, 'sku', 'SKU', 'Sku'), seq DIV 300), seq, seq FROM seq_1_to_%d`, rows),
		`CREATE TABLE n (id BIGINT UNSIGNED PRIMARY KEY, v INT)`,
		fmt.Sprintf(`INSERT INTO n SELECT IF(seq %% 2, seq, 9223372036854775807 + seq), seq FROM seq_1_to_%d`, rows),
		// Two rows of each first value, on either side of a bound's
		// second value where the bound's first value is theirs.
		`CREATE TABLE u (a BIGINT UNSIGNED, b INT, v INT, PRIMARY KEY (a, b))`,
		fmt.Sprintf(`INSERT INTO u SELECT IF(seq %% 2, seq DIV 4, 9223372036854775807 + seq DIV 4), seq %% 4, seq FROM seq_1_to_%d`, rows),
		// A time series keyed (at, id), a zero date first; amounts whose
		// text is not in their order; times before zero and past a day;
		// a year, a timestamp and a date together.
		`CREATE TABLE t (at DATETIME(6), id INT, v INT, PRIMARY KEY (at, id))`,
		fmt.Sprintf(`INSERT INTO t SELECT IF(seq = 1, '0000-00-00 00:00:00', TIMESTAMP('2024-01-01') + INTERVAL seq * 3571 SECOND + INTERVAL seq MICROSECOND), seq %% 3, seq FROM seq_1_to_%d`, rows),
		`CREATE TABLE d (amount DECIMAL(12,3) PRIMARY KEY, v INT)`,
		fmt.Sprintf(`INSERT INTO d SELECT IF(seq %% 2, -1, 1) * CAST(seq AS SIGNED) * 1.5 / 7, seq FROM seq_1_to_%d`, rows),
		`CREATE TABLE h (tm TIME(1) PRIMARY KEY, v INT)`,
		fmt.Sprintf(`INSERT INTO h SELECT SEC_TO_TIME(CAST(seq AS SIGNED) * 997 - 3000000 + (seq %% 2) * 0.5), seq FROM seq_1_to_%d`, rows),
		`CREATE TABLE y (yr YEAR, ts TIMESTAMP, day DATE, PRIMARY KEY (yr, ts, day))`,
		fmt.Sprintf(`INSERT INTO y SELECT 1990 + seq %% 40, FROM_UNIXTIME(1000000000 + seq * 1000), DATE('2000-01-01') + INTERVAL seq DAY FROM seq_1_to_%d`, rows),
		// Zero dates and dates with a zero month or day, a chunk's
		// last row among them: the next chunk starts after one.
		`CREATE TABLE z (day DATE, id INT, PRIMARY KEY (day, id))`,
		fmt.Sprintf(`INSERT INTO z SELECT CASE WHEN seq <= 1500 THEN '0000-00-00' WHEN seq <= 3000 THEN '2024-00-15' ELSE DATE('2024-01-01') + INTERVAL seq DAY END, seq FROM seq_1_to_%d`, rows),
		// A tenant's SKUs: an integer, then characters.
		`CREATE TABLE i (tenant INT, sku VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci, v INT, PRIMARY KEY (tenant, sku))`,
		fmt.Sprintf(`INSERT INTO i SELECT seq %% 7, CONCAT(ELT(seq %% 3 + 1, 'sku', 'SKU', 'Sku'), seq), seq FROM seq_1_to_%d`, rows),
		// Every YEAR, 0 among them: the copy reads it as 0, the server
		// writes "0000".
		`CREATE TABLE yy (yr YEAR PRIMARY KEY, v INT)`,
		`INSERT INTO yy SELECT IF(seq = 1900, 0, seq), seq FROM seq_1900_to_2155`,
		`ANALYZE TABLE c, m, n, u, t, d, h, y, z, i, yy`)
	// Read as a server whose sql_mode refuses zero dates (MySQL 8's
	// default) reads: the copy takes them out of its session's.
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO'"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table  string
		bounds []string // the first key column's, in byte order
	}{
		{"keys.c", []string{"", "M", "a", "ab~", "\xc3", ""}},
		{"keys.m", []string{"", "SKU", "Sku", "sku", ""}},
		{"keys.n", []string{"", "5", "9223372036854775900", ""}},
		{"keys.u", []string{"", "5,2", "9223372036854775900,1", ""}}, // whole keys
		{"keys.t", []string{"", "2024-03", "2024-07-15 1", ""}},
		{"keys.d", []string{"", "-", "1", "5", ""}},
		{"keys.h", []string{"", "-1", "-5", "1", "3", ""}},
		{"keys.y", []string{"", "2000", "2015", ""}},
		{"keys.z", []string{"", "0000-00-00", "2024-00", "2024-06", ""}},
		{"keys.i", []string{"", "2", "5,SKU", ""}},
		{"keys.yy", []string{"", "0000", "1950", ""}},
	} {
		def, _, err := tableDef(ctx, conn, tc.table)
		if err != nil {
			t.Fatal(err)
		}
		if !indexOrdered(def) {
			t.Fatalf("%s is not copied in its index order", tc.table)
		}
		colls, err := keyCollations(ctx, conn, tc.table)
		if err != nil {
			t.Fatal(err)
		}
		types := keyTypes(def)
		first := strings.Split(types, ",")[0]
		seen, read := map[string]int{}, 0
		bound := func(b string) string {
			if b == "" {
				return ""
			}
			if strings.Contains(b, ",") {
				k, err := model.EncodeKey(types, b)
				if err != nil {
					t.Fatal(err)
				}
				return k
			}
			k, _ := model.EncodeKeyValues(first, []string{b})
			return k
		}
		for i := 0; i+1 < len(tc.bounds); i++ {
			span := model.Span{Table: tc.table, Key: types, Start: bound(tc.bounds[i]), End: bound(tc.bounds[i+1])}
			var copied model.CopyProgress
			for chunk := 0; ; chunk++ {
				// Every other chunk grows (source.ChunkAsk) from a
				// first read of half its rows: its second read goes on
				// from the first's last row, in the index's order.
				ask := source.ChunkAsk{Rows: limit}
				if chunk%2 == 0 {
					ask = source.ChunkAsk{Rows: limit / 2, Most: limit}
				}
				// Bounded at the copy's horizon (the last row it reads, read
				// with the first full chunk) as a partition's chunks are:
				// still a range of the index, and no row of it left out.
				q, err := indexQuery(def, span, copied.Cursor, copied.Horizon, ask.Rows, "", colls)
				if err != nil {
					t.Fatal(err)
				}
				if chunk > 0 {
					explainRange(t, conn, q, "a chunk of "+tc.table)
				}
				var horizon func() (string, error)
				if copied.Horizon == "" {
					horizon = func() (string, error) { return indexQuery(def, span, "", "", 1, " DESC", colls) }
				}
				c := source.NewChunk(span.Table, def, ask.Rows)
				c.Ordered = true
				if err := readChunk(ctx, conn, c, q, ask, readOn(def, span, copied.Horizon, colls), horizon); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				if ask.Most > ask.Rows && c.Full && c.Limit == ask.Rows {
					t.Fatalf("%s: a chunk asked for %+v read its first rows and no more", tc.table, ask)
				}
				read += c.Read
				c.Within(span.Contains)
				for _, e := range c.Rows {
					if !span.Contains(e.Key) {
						t.Fatalf("%s: a row outside its span", tc.table)
					}
					seen[e.Key]++
				}
				if !c.Full {
					break
				}
				if chunk > rows/limit*len(tc.bounds) {
					t.Fatalf("%s: %d chunks and on", tc.table, chunk)
				}
				copied = c.Through(copied)
			}
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("%s: key %q copied %d times", tc.table, model.DecodeKey(types, k), n)
			}
		}
		if want := map[bool]int{true: 256, false: rows}[tc.table == "keys.yy"]; len(seen) != want {
			t.Fatalf("%s: copied %d rows of %d", tc.table, len(seen), want)
		}
		// A BIGINT UNSIGNED key's partitions read the values of their own
		// ranges only (unsigned.go): each row once, not once a partition;
		// on a key of two columns, the rows of a bound's first value are
		// read by both its neighbours (two such rows at each of two). So
		// do those of a key whose first column is characters, a DECIMAL,
		// a date or a time, or an integer (firstbound.go): the 857 rows
		// of tenant 5 twice. A YEAR's partitions read the whole table.
		if want := map[string]int{"keys.n": rows, "keys.u": rows + 4, "keys.c": rows, "keys.m": rows, "keys.i": rows + 857,
			"keys.t": rows, "keys.d": rows, "keys.h": rows, "keys.y": 3 * rows, "keys.z": rows, "keys.yy": 3 * 256}[tc.table]; read != want {
			t.Fatalf("%s: its %d partitions read %d rows, want %d", tc.table, len(tc.bounds)-1, read, want)
		}
	}
}

// BenchmarkCharacterKeyChunks copies a table keyed by a VARCHAR under a
// collation that folds case in chunks, as one partition does: in the
// key's index order (from a cursor) and, in the same run, by the bytes of
// its text (each chunk cast and sorted the rest of the table, as before
// 2026-12-04), against one flat SELECT ... ORDER BY of the whole table.
// Rows per second of each, and each against the SELECT; the runs
// alternate, after a warm-up read.
func BenchmarkCharacterKeyChunks(b *testing.B) {
	const rows = 200_000
	benchKeyChunks(b, rows, "SELECT k, v FROM keys.c ORDER BY k",
		`CREATE TABLE c (k VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, v VARCHAR(40))`,
		fmt.Sprintf(`INSERT INTO c SELECT CONCAT(ELT(seq %% 3 + 1, 'sku-', 'SKU-', 'Sku-'), MD5(seq)), MD5(seq) FROM seq_1_to_%d`, rows),
		`ANALYZE TABLE c`)
}

// BenchmarkTimeKeyChunks is BenchmarkCharacterKeyChunks for a time
// series keyed (at DATETIME(6), id), copied by the bytes of its text
// before 2026-12-05.
func BenchmarkTimeKeyChunks(b *testing.B) {
	const rows = 200_000
	benchKeyChunks(b, rows, "SELECT at, id, v FROM keys.c ORDER BY at, id",
		`CREATE TABLE c (at DATETIME(6), id INT, v VARCHAR(40), PRIMARY KEY (at, id))`,
		fmt.Sprintf(`INSERT INTO c SELECT TIMESTAMP('2024-01-01') + INTERVAL seq * 7 SECOND, seq %% 5, MD5(seq) FROM seq_1_to_%d`, rows),
		`ANALYZE TABLE c`)
}

// benchKeyChunks times table keys.c (rows rows, made by stmts) copied
// in chunks in its key's index order and by bytes, against flat.
func benchKeyChunks(b *testing.B, rows int, flatQuery string, stmts ...string) {
	const limit = 8192
	ctx := context.Background()
	conn := keysConn(b, stmts...)
	def, _, err := tableDef(ctx, conn, "keys.c")
	if err != nil {
		b.Fatal(err)
	}
	colls, err := keyCollations(ctx, conn, "keys.c")
	if err != nil {
		b.Fatal(err)
	}
	span := model.Span{Table: "keys.c", Key: keyTypes(def)}
	copyAll := func(ordered bool) (int, time.Duration) {
		began := time.Now()
		var copied model.CopyProgress
		n := 0
		for {
			var q string
			if ordered {
				q, err = orderedQuery(def, span, copied.Cursor, limit, colls)
			} else {
				q, err = rangeQuery(def, span, copied, limit)
			}
			if err != nil {
				b.Fatal(err)
			}
			c := source.NewChunk(span.Table, def, limit)
			c.Ordered = ordered
			if err := readChunk(ctx, conn, c, q, source.ChunkAsk{Rows: limit}, nil, nil); err != nil {
				b.Fatal(err)
			}
			n += len(c.Rows)
			if !c.Full {
				return n, time.Since(began)
			}
			copied = c.Through(copied)
		}
	}
	flat := func() time.Duration {
		began := time.Now()
		c := source.NewChunk(span.Table, def, rows+1)
		if err := readChunk(ctx, conn, c, flatQuery, source.ChunkAsk{Rows: rows + 1}, nil, nil); err != nil {
			b.Fatal(err)
		}
		if len(c.Rows) != rows {
			b.Fatalf("the SELECT read %d rows of %d", len(c.Rows), rows)
		}
		return time.Since(began)
	}
	flat() // warm the buffer pool
	var byIndex, byBytes, base time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		base += flat()
		n, d := copyAll(true)
		if n != rows {
			b.Fatalf("in index order: %d rows of %d", n, rows)
		}
		byIndex += d
		if n, d = copyAll(false); n != rows {
			b.Fatalf("by bytes: %d rows of %d", n, rows)
		}
		byBytes += d
	}
	b.ReportMetric(float64(rows*b.N)/byIndex.Seconds(), "rows/s-index-order")
	b.ReportMetric(float64(rows*b.N)/byBytes.Seconds(), "rows/s-by-bytes")
	b.ReportMetric(float64(rows*b.N)/base.Seconds(), "select-rows/s")
	b.ReportMetric(base.Seconds()/byIndex.Seconds(), "ratio-index-order")
	b.ReportMetric(base.Seconds()/byBytes.Seconds(), "ratio-by-bytes")
}
