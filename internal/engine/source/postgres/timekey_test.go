package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math/rand"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table keyed by a time first is copied from its key's index where the
// times' text is in their order: a time series keyed by (timestamptz,
// int4), a table keyed by a date, and one keyed by a timestamp before
// text in ICU's collation (the index gives the time; each time's rows are
// sorted by their text). The times have fractions of every length, the
// years 44 and 9999, the infinities, and many rows per time. The
// partitions are cut at times that are a row's, at years and months
// ("2021", "2022-06"), at a digit ("5"), above every year ("m") and at
// 'infinity'; every chunk after the first is a range scan of the index,
// and every row is copied once, in routing order, inside its partition.
// Then the same tables where the text is not in the times' order — the
// database's TimeZone with summer time (a timestamptz's text then has its
// offset), a date before year 1 — are read by sorting, and still copy
// every row once.
func TestATimeKeyedTableIsCopiedFromItsIndex(t *testing.T) {
	t.Parallel()
	const limit = 700
	_, dsn := newDB(t, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET TimeZone = %L', current_database(), 'Etc/UTC');
		EXECUTE format('ALTER DATABASE %I SET DateStyle = %L', current_database(), 'ISO, DMY'); END $$;
		CREATE TABLE tt (at timestamptz, dev int4, v text, PRIMARY KEY (at, dev));
		INSERT INTO tt SELECT timestamptz '2020-01-01 00:00:00+00' + (g * 7919 % 5000) * interval '3 hours 7 minutes' + (g % 7) * interval '1.25 us' + (g % 3) * interval '0.5 s', g % 4, md5(g::text)
			FROM generate_series(1, 6000) g ON CONFLICT DO NOTHING;
		INSERT INTO tt VALUES ('infinity', 1, ''), ('infinity', 2, ''), ('-infinity', 1, ''), ('0044-03-15 12:00:00+00', 1, ''), ('9999-12-31 23:59:59.999999+00', 1, '');
		CREATE TABLE td (day date, store int4, v int4, PRIMARY KEY (day, store));
		INSERT INTO td SELECT date '2019-01-01' + g / 5, g % 5, g FROM generate_series(1, 5000) g;
		INSERT INTO td VALUES ('infinity', 0, 0), ('-infinity', 0, 0), ('0001-01-01', 0, 0);
		CREATE TABLE tw (at timestamp, name text COLLATE "und-x-icu", PRIMARY KEY (at, name));
		INSERT INTO tw SELECT timestamp '2021-06-01' + (g % 400) * interval '1 day 1.5 s', CASE g % 3 WHEN 0 THEN upper(md5(g::text)) ELSE md5(g::text) END
			FROM generate_series(1, 4000) g`)
	ctx := context.Background()
	for _, c := range []struct {
		table, keyTypes, index string
		order                  readOrder
		bounds                 func(conn *pgx.Conn) [][]string
	}{
		{"tt", "timestamptz,int4", "tt_pkey", indexOrder, func(conn *pgx.Conn) [][]string {
			var mid string
			if err := conn.QueryRow(ctx, `SELECT at::text FROM tt WHERE at >= '2021-03-01' ORDER BY at OFFSET 500 LIMIT 1`).Scan(&mid); err != nil {
				t.Fatal(err)
			}
			return [][]string{nil, {"2021", "0"}, {mid, "2"}, {"2022-06", "7"}, {"5", "0"}, {"infinity", "2"}, {"m", "0"}, nil}
		}},
		{"td", "date,int4", "td_pkey", indexOrder, func(conn *pgx.Conn) [][]string {
			return [][]string{nil, {"0001-01-01", "0"}, {"2019-03-01", "3"}, {"2019-07", "0"}, {"2020-12-31", "9"}, {"infinity", "0"}, nil}
		}},
		{"tw", "timestamp,text", "tw_pkey", prefixOrder, func(conn *pgx.Conn) [][]string {
			var at, name string
			if err := conn.QueryRow(ctx, `SELECT at::text, name FROM tw ORDER BY at, name COLLATE "C" OFFSET 2000 LIMIT 1`).Scan(&at, &name); err != nil {
				t.Fatal(err)
			}
			return [][]string{nil, {"2021-09", "a"}, {at, name}, {at, name + "0"}, {"2022", "Z"}, nil}
		}},
	} {
		copyTimeKeyed(t, dsn, c.table, c.keyTypes, c.bounds, limit, fromIndex(c.index, c.order))
	}

	tables := copying("public.tt", "public.td", "public.tw")
	if w := CopyWarnings(ctx, dsn, tables); len(w) != 0 {
		t.Fatalf("tables read from their index are warned of: %q", w)
	}

	// Where the times' text is not in their order, the chunks are sorted,
	// and right, and changefeed get says why: a date before year 1, and
	// a timestamptz written in a zone with summer time, which the
	// operator chose (timezone=); the database's own zone does not count,
	// the source's sessions write in UTC whatever it is.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET TimeZone = %L', current_database(), 'America/New_York'); END $$;
		INSERT INTO tt VALUES ('2021-11-07 01:15:00-04', 9, ''), ('2021-11-07 01:30:00-04', 9, ''), ('2021-11-07 01:10:00-05', 9, '');
		INSERT INTO td VALUES ('0044-03-15 BC', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	summer := dsn + "&timezone=America/New_York"
	sorted := func(plan string, first bool) bool { return plan == "" || strings.Contains(plan, "Sort") }
	around := func(*pgx.Conn) [][]string {
		return [][]string{nil, {"2021", "0"}, {"2021-11-07 01:20", "0"}, {"2022", "0"}, nil}
	}
	copyTimeKeyed(t, dsn, "tt", "timestamptz,int4", around, limit, fromIndex("tt_pkey", indexOrder))
	copyTimeKeyed(t, summer, "tt", "timestamptz,int4", around, limit, sorted)
	copyTimeKeyed(t, dsn, "td", "date,int4", around, limit, sorted)
	if w := CopyWarnings(ctx, dsn, tables); len(w) != 1 || !strings.Contains(w[0], "public.td is keyed by (day, store)") {
		t.Fatalf("in UTC, only td's sorted copy should be warned of: %q", w)
	}
	w := CopyWarnings(ctx, summer, tables) // by table
	if len(w) != 2 || !strings.Contains(w[1], "public.tt is keyed by (at, dev)") || !strings.Contains(w[0], "public.td is keyed by (day, store)") || !strings.Contains(w[0], "DateStyle ISO") {
		t.Fatalf("the sorted copies of tt and td are warned of as %q", w)
	}
}

// fromIndex says a chunk after the first (bounded below by a row's time)
// is a range scan of the key's index, the rest of each time sorted where
// the index does not give it (order prefixOrder).
func fromIndex(index string, order readOrder) func(plan string, first bool) bool {
	return func(plan string, first bool) bool {
		if plan == "" || first {
			return true
		}
		sorts := strings.Contains(plan, "Sort")
		if order == prefixOrder {
			sorts = fullSort.MatchString(plan) || !strings.Contains(plan, "Incremental Sort")
		}
		return !sorts && strings.Contains(plan, "Scan using "+index+" ") && strings.Contains(plan, "Index Cond")
	}
}

// fullSort finds a plan's Sort node (not an incremental one).
var fullSort = regexp.MustCompile(`(?m)(^|->  )Sort  \(`)

// A time series copied by three partitions under writes (cut at a row's
// time and at a month, "2021-03", which is no value's text), in chunks of
// 500 read from the key's index: updates, deletes and inserts of new
// times into every partition's range go on while they copy. The rows the
// partitions delivered, applied in order, equal the table afterwards; no
// row that existed was copied twice; no chunk had to be sorted.
func TestATimeKeyedTableIsCopiedConsistentWithTheStream(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET TimeZone = %L', current_database(), 'UTC'); END $$;
		CREATE TABLE ts (at timestamptz, dev int4, v text, n int4, PRIMARY KEY (at, dev));
		INSERT INTO ts SELECT timestamptz '2021-01-01 00:00:00+00' + (g / 3) * interval '1 hour 0.25 s', g % 3, md5(g::text), 0 FROM generate_series(1, 6000) g`)
	ctx := context.Background()
	const keyTypes = "timestamptz,int4"
	key := func(vals ...string) string {
		k, err := model.EncodeKeyValues(keyTypes, vals)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var mid string
	if err := conn.QueryRow(ctx, `SELECT at::text FROM ts ORDER BY at OFFSET 2500 LIMIT 1`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	existed := map[string]bool{}
	rs, _ := conn.Query(ctx, `SELECT at::text || ',' || dev FROM ts`)
	keys, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		existed[k] = true
	}

	stop := writeUntil(t, dsn, 5, func(conn *pgx.Conn, rng *rand.Rand) error {
		var err error
		switch rng.Intn(4) {
		case 0:
			_, err = conn.Exec(ctx, `DELETE FROM ts WHERE (at, dev) IN (SELECT at, dev FROM ts WHERE dev < 3 OFFSET $1 LIMIT 1)`, rng.Intn(5000))
		case 1:
			_, err = conn.Exec(ctx, `INSERT INTO ts VALUES (timestamptz '2021-01-01 00:00:00+00' + $1 * interval '1.5 ms', 7, 'new', 1) ON CONFLICT DO NOTHING`, rng.Intn(2000*3600*600))
		default:
			_, err = conn.Exec(ctx, `UPDATE ts SET n = n + 1, v = 'upd' WHERE (at, dev) IN (SELECT at, dev FROM ts OFFSET $1 LIMIT 1)`, rng.Intn(5000))
		}
		return err
	})
	time.Sleep(200 * time.Millisecond) // the writes are under way

	rig := startCopyRig(t, dsn+"&tables=ts&chunk-rows=500", "snap_time")
	spans := []model.Span{
		{Table: "public.ts", Key: keyTypes, End: key(mid, "1")},
		{Table: "public.ts", Key: keyTypes, Start: key(mid, "1"), End: key("2021-03", "0")},
		{Table: "public.ts", Key: keyTypes, Start: key("2021-03", "0")},
	}
	var parts []*partition
	for _, span := range spans {
		parts = append(parts, rig.run(span, rig.start, model.CopyProgress{}))
	}
	for _, p := range parts {
		p.waitDone(t)
	}
	stop()
	psql(t, srv, dsn, `INSERT INTO ts VALUES ('2030-01-01 00:00:00+00', 0, 'last', 0)`)
	for deadline := time.Now().Add(30 * time.Second); !parts[2].has("2030-01-01 00:00:00+00,0"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last change did not arrive")
		}
	}
	var evs []source.Event
	for _, p := range parts {
		evs = append(evs, p.stopped(t)...)
	}
	rig.stop(t)
	if _, told := rig.src.sortsTold.Load("public.ts"); told {
		t.Fatal("a chunk of the time series was sorted")
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].CommitTs < evs[j].CommitTs })
	rows, copies := map[string]string{}, map[string]int{}
	for i := range evs {
		e := &evs[i]
		if e.Kind != source.KindDML {
			continue
		}
		switch k := textKey(e); e.Op {
		case source.OpDelete:
			delete(rows, k)
		default:
			if e.Op == source.OpInsert && existed[k] {
				copies[k]++
			}
			rows[k] = e.New[2].Text + "/" + e.New[3].Text
		}
	}
	rs, _ = conn.Query(ctx, `SELECT at::text || ',' || dev, v || '/' || n FROM ts`)
	want := map[string]string{}
	for rs.Next() {
		var k, v string
		if err := rs.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	missing, extra, different, twice := 0, 0, 0, 0
	for k, v := range want {
		switch g, ok := rows[k]; {
		case !ok:
			missing++
		case g != v:
			different++
		}
	}
	for k := range rows {
		if _, ok := want[k]; !ok {
			extra++
		}
	}
	for _, n := range copies {
		if n > 1 {
			twice++
		}
	}
	if missing+extra+different+twice > 0 || len(want) < 5000 {
		t.Fatalf("rebuilt from the partitions: %d missing, %d extra, %d different of %d rows; %d copied twice", missing, extra, different, len(want), twice)
	}
	t.Logf("%d rows equal after a snapshot of a time series by partitions under writes (%d events)", len(want), len(evs))
}

// copyInParts copies table cut at bounds (key values; nil is open), in
// chunks of limit rows, checking each chunk's plan and what its read told
// (planned: plan "" for a range known to be empty; chunk, the
// partition's chunk; start, its partition's lower bound; sorted, what the
// read tells the operator of a sorted chunk), and that every row (the
// table holds at least least) is copied once, in routing order, inside
// its partition.
func copyInParts(t *testing.T, dsn, table, keyTypes string, bounds func(*pgx.Conn) [][]string, limit, least int, planned func(plan string, chunk int, start []string, sorted string) bool) {
	t.Helper()
	ctx := context.Background()
	cfg, conn, def := chunkReader(t, dsn, table)
	order, err := (&catalog{conn: conn, types: map[uint32]string{}}).byteOrder(ctx, "public."+table, def)
	if err != nil {
		t.Fatal(err)
	}
	cut := bounds(conn)
	seen := map[string]int{}
	for i := 0; i+1 < len(cut); i++ {
		span := model.Span{Table: "public." + table, Key: keyTypes}
		for p, v := range map[*string][]string{&span.Start: cut[i], &span.End: cut[i+1]} {
			if v != nil {
				if *p, err = model.EncodeKeyValues(keyTypes, v); err != nil {
					t.Fatal(err)
				}
			}
		}
		var copied model.CopyProgress
		prev := ""
		for chunk := 0; ; chunk++ {
			plan := chunkPlan(t, conn, def, order, span, copied, limit)
			if strings.Contains(plan, "One-Time Filter: false") {
				plan = ""
			}
			ch, sorted, err := readRange(ctx, conn, cfg, span, copied, halfGrown(chunk, limit), func(*source.Chunk) bool { return true }, func(*source.Chunk) {})
			if err != nil {
				t.Fatalf("%s: %v", table, err)
			}
			if !planned(plan, chunk, cut[i], sorted) {
				t.Fatalf("%s: chunk %d in [%q, %q) is not read as it should be (told %q):\n%s", table, chunk, cut[i], cut[i+1], sorted, plan)
			}
			for _, e := range ch.Rows {
				if e.Key <= prev || !span.Contains(e.Key) {
					t.Fatalf("%s: [%q, %q) read %q after %q", table, cut[i], cut[i+1], model.DecodeKey(keyTypes, e.Key), model.DecodeKey(keyTypes, prev))
				}
				prev = e.Key
				seen[e.Key]++
			}
			if !ch.Full {
				break
			}
			copied = copied.CopiedThrough(ch.Last)
		}
	}
	var upstream int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&upstream); err != nil {
		t.Fatal(err)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s: row %q copied %d times", table, model.DecodeKey(keyTypes, k), n)
		}
	}
	if len(seen) != upstream || upstream < least {
		t.Fatalf("%s: copied %d rows of %d upstream", table, len(seen), upstream)
	}
}

// copyTimeKeyed is copyInParts of a table keyed by a time first, its
// chunks' plans checked by planned (first: the partition's first chunk).
func copyTimeKeyed(t *testing.T, dsn, table, keyTypes string, bounds func(*pgx.Conn) [][]string, limit int, planned func(plan string, first bool) bool) {
	t.Helper()
	if _, _, def := chunkReader(t, dsn, table); !timeLed(def) {
		t.Fatalf("%s (key %v, columns %+v) is not taken as keyed by a time first", table, def.KeyNames(), def.Columns)
	}
	copyInParts(t, dsn, table, keyTypes, bounds, limit, 4_000, func(plan string, chunk int, _ []string, _ string) bool {
		return planned(plan, chunk == 0)
	})
}

// tv is a value of a time column in a model: an infinity (inf -1 or 1)
// or a time.
type tv struct {
	inf int
	t   time.Time
}

func (a tv) cmp(b tv) int {
	if a.inf != b.inf {
		return a.inf - b.inf
	}
	return a.t.Compare(b.t)
}

// text is the value's text as PostgreSQL writes it for kind (ISO, UTC).
func (a tv) text(kind string) string {
	switch {
	case a.inf < 0:
		return "-infinity"
	case a.inf > 0:
		return "infinity"
	case kind == "date":
		return a.t.Format("2006-01-02")
	case kind == "timestamptz":
		return a.t.Format("2006-01-02 15:04:05.999999") + "+00"
	}
	return a.t.Format("2006-01-02 15:04:05.999999")
}

// parseTV reads a cut's or an exact bound's value.
func parseTV(t *testing.T, kind, v string) tv {
	switch v {
	case "infinity":
		return tv{inf: 1}
	case "-infinity":
		return tv{inf: -1}
	}
	v = strings.TrimSuffix(v, "+00")
	for _, layout := range []string{"2006-01-02 15:04:05.999999", "2006-01-02"} {
		if x, err := time.Parse(layout, v); err == nil {
			return tv{t: x}
		}
	}
	t.Fatalf("%s value %q is not a time", kind, v)
	return tv{}
}

// nativeBound's condition on a key of a time (whose text is in its order)
// and an integer, as they are, holds for every row its chunk bound on
// their text holds for (it may hold for more: the text bound stays in
// the query), and for exactly those where the bound's time is a value's
// own text: bound values of every form (a value's text, a year, a month,
// a digit, text below and above every year, the infinities), each kind
// and each bound op, against times at and around the bound and its cut.
func FuzzTimeBound(f *testing.F) {
	for _, v := range []string{"", "2", "2021", "2022-06", "2022-06-01", "2022-06-01 00:00:00+00", "2022-06-01 10:11:12.5+00", "2022-06-01 10:11:12.123456",
		"0044-03-15", "9999-12-31 23:59:59.999999+00", "9999", "0000", "infinity", "-infinity", "m", "a", "-", "2022-13", "2022-06-01 10:11:12.1000+00"} {
		f.Add(v, int64(3), int64(1_700_000_000_000_000), uint8(0))
	}
	f.Fuzz(func(t *testing.T, v string, n, micros int64, kindIdx uint8) {
		kind := []string{"date", "timestamp", "timestamptz"}[kindIdx%3]
		domain := func(x time.Time) bool { return x.Year() >= 1 && x.Year() <= 9999 }
		near := []tv{{inf: -1}, {inf: 1}, {t: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}, {t: time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)}}
		if x := time.UnixMicro(micros % 253402300800000000).UTC(); domain(x) {
			near = append(near, tv{t: x})
		}
		around := func(x tv) {
			for _, d := range []time.Duration{-24 * time.Hour, -time.Second, -time.Microsecond, 0, time.Microsecond, time.Second, 24 * time.Hour} {
				if y := x.t.Add(d); x.inf == 0 && domain(y) {
					near = append(near, tv{t: y})
				}
			}
		}
		c := timeCut(kind, v)
		for _, s := range []string{v, c.lower, c.upper} {
			if x, ok := parseLoose(s); ok {
				around(tv{t: x})
			}
		}
		for i := range near {
			if kind == "date" {
				near[i].t = near[i].t.Truncate(24 * time.Hour)
			}
		}
		for _, op := range []string{">=", ">", "<"} {
			b := source.ChunkBound{Op: op, Vals: []string{v, strconv.FormatInt(n, 10)}}
			native, cols, vals := nativeBound(b, []func(string) cut{func(v string) cut { return timeCut(kind, v) }, exactCut})
			for _, x := range near {
				for _, m := range []int64{n - 1, n, n + 1} {
					byText := holds(cmp.Or(strings.Compare(x.text(kind), v), cmpInt(m, n)), op)
					var asThey bool
					switch native {
					case "":
						asThey = true
					case "FALSE":
					default:
						cmps := []int{x.cmp(parseTV(t, kind, vals[0]))}
						if cols > 1 {
							k, _ := strconv.ParseInt(vals[1], 10, 64)
							cmps = append(cmps, cmpInt(m, k))
						}
						asThey = holds(cmp.Or(cmps...), native)
					}
					if byText && !asThey || c.exact && byText != asThey {
						t.Fatalf("%s key, bound %s (%q, %d): row (%q, %d) is in by its text %v, by the columns' bound (%s on %d columns, %q) %v", kind, op, v, n, x.text(kind), m, byText, native, cols, vals, asThey)
					}
				}
			}
		}
	})
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parseLoose reads the time a text begins with, if any.
func parseLoose(s string) (time.Time, bool) {
	s = strings.TrimSuffix(s, "+00")
	for _, layout := range []string{"2006-01-02 15:04:05.999999", "2006-01-02", "2006-01", "2006"} {
		if x, err := time.Parse(layout, s); err == nil {
			return x, true
		}
	}
	return time.Time{}, false
}

func TestTimeText(t *testing.T) {
	for _, c := range []struct {
		kind, v string
		want    bool
	}{
		{"date", "2022-06-01", true},
		{"date", "2022-06-01 00:00:00", false},
		{"date", "2022-6-1", false},
		{"date", "0000-01-01", false},
		{"date", "0001-01-01", true},
		{"timestamp", "2022-06-01", false},
		{"timestamp", "2022-06-01 00:00:00", true},
		{"timestamp", "2022-06-01 10:11:12.5", true},
		{"timestamp", "2022-06-01 10:11:12.50", false}, // PostgreSQL writes no trailing zero
		{"timestamp", "2022-06-01 10:11:12.123456", true},
		{"timestamp", "2022-06-01 24:00:00", false},
		{"timestamp", "infinity", true},
		{"timestamptz", "2022-06-01 10:11:12+00", true},
		{"timestamptz", "2022-06-01 10:11:12-04", false},
		{"timestamptz", "2022-06-01 10:11:12", false},
		{"timestamptz", "-infinity", true},
	} {
		if got := timeText(c.kind, c.v); got != c.want {
			t.Errorf("timeText(%s, %q) = %v, want %v", c.kind, c.v, got, c.want)
		}
	}
	if got := timeCut("date", "2022-06"); got.lower != "2022-01-01" || got.upper != "2023-01-01" {
		t.Errorf("timeCut(date, 2022-06) = %+v, want the year 2022", got)
	}
	if got := timeCut("date", "2"); got.lower != "2000-01-01" || got.upper != "3000-01-01" {
		t.Errorf("timeCut(date, 2) = %+v, want the years 2000 to 2999", got)
	}
	if got := timeCut("date", "m"); !got.none {
		t.Errorf("timeCut(date, m) = %+v, want none above it", got)
	}
}

// BenchmarkTimeKeyChunks reads a time series of 200,000 rows keyed by
// (at timestamptz, dev int4) in chunks of the default size, one partition
// from start to end, with the index's range scans in time order (each
// chunk's check that the times' text is in their order included) against
// the queries in the key's text order, sorted, which such a key was read
// with before, in the same run, in turn: the query's time alone (rows
// read, not built).
//
//	go test -run '^$' -bench TimeKeyChunks -benchtime 3x ./internal/engine/source/postgres
func BenchmarkTimeKeyChunks(b *testing.B) {
	const rows = 200_000
	_, dsn := newDB(b, fmt.Sprintf(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET TimeZone = %%L', current_database(), 'UTC'); END $$;
		CREATE TABLE tb (at timestamptz, dev int4, v text, PRIMARY KEY (at, dev));
		INSERT INTO tb SELECT timestamptz '2024-01-01 00:00:00+00' + (g / 4) * interval '1.5 s', g %% 4, md5(g::text) FROM generate_series(1, %d) g; ANALYZE tb`, rows))
	benchIndexAgainstTextOrder(b, dsn, "tb", "timestamptz,int4", rows, func(def *source.TableDef) chunkQuery {
		return func(def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (string, []any, []int, error) {
			return rangeQuery(quoteQualified(span.Table), def, nil, true, span, copied, limit)
		}
	})
}
