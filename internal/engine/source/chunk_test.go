package source

import (
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A chunk's row keeps its values as read (NULL as NULL) and is routed by
// its key's columns in the key's order, which need not be the columns':
// here the key is (region, id) over columns (id, note, region).
func TestAChunkRowIsKeyedInTheKeysOrder(t *testing.T) {
	def := &TableDef{Columns: []ColumnDef{{Name: "id", Type: "int8", KeyPos: 2}, {Name: "note", Type: "text"}, {Name: "region", Type: "text", KeyPos: 1}}}
	c := NewChunk("public.t", def, 2)
	rows := [][][]byte{{[]byte("7"), nil, []byte("eu")}, {[]byte("12"), []byte("a note"), []byte("us")}}
	for _, r := range rows {
		if err := c.AddRow(r, []int{2, 0}, "text,int8"); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range rows {
		want, err := model.EncodeKeyValues("text,int8", []string{string(r[2]), string(r[0])})
		if err != nil {
			t.Fatal(err)
		}
		e := c.Rows[i]
		if e.Key != want {
			t.Errorf("row %d is keyed %q, want %q (region, then id)", i, e.Key, want)
		}
		for j, v := range r {
			if got := e.New[j]; got.Null != (v == nil) || got.Text != string(v) {
				t.Errorf("row %d column %d is %+v, want %q (NULL %v)", i, j, got, v, v == nil)
			}
		}
	}
}

// A chunk's rows are cut to its span and emitted at the high watermark
// in key order, each once: a row outside the span (first, between and
// last) is left out, a key the stream changed in the window is dropped,
// and the rest carry the high watermark's position and definition.
// Rows added past a grown chunk's first array stay in order and its
// array never passes the rows asked.
func TestAChunksRowsAreCutToItsSpanAndEmittedInOrder(t *testing.T) {
	// Rows left out and dropped from the first on, and only after rows
	// kept (those are neither moved nor stamped otherwise).
	cutAndEmit(t, []int{1, 17, 18, 40}, []int{2, 30})
	cutAndEmit(t, []int{17, 18}, []int{30})
	cutAndEmit(t, nil, nil)
}

func cutAndEmit(t *testing.T, outside, changed []int) {
	t.Helper()
	def := &TableDef{Columns: []ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
	c := NewChunk("public.t", def, 3)
	for i := 1; i <= 3; i++ {
		if err := c.AddRow([][]byte{[]byte(fmt.Sprint(i))}, []int{0}, "int8"); err != nil {
			t.Fatal(err)
		}
	}
	c.Limit = 40 // as Grow raises it
	for i := 4; i <= 40; i++ {
		if err := c.AddRow([][]byte{[]byte(fmt.Sprint(i))}, []int{0}, "int8"); err != nil {
			t.Fatal(err)
		}
		if cap(c.Rows) > c.Limit {
			t.Fatalf("after %d rows the chunk's array holds %d, more than the %d asked", i, cap(c.Rows), c.Limit)
		}
	}
	c.Loaded()
	key := func(i int) string {
		k, _ := model.EncodeKeyValues("int8", []string{fmt.Sprint(i)})
		return k
	}
	out, dropped := map[string]bool{}, map[string]bool{}
	for _, i := range outside {
		out[key(i)] = true
	}
	c.Within(func(k string) bool { return !out[k] })
	c.open = true
	for _, i := range changed {
		dropped[key(i)] = true
		c.observe(&Event{Kind: KindDML, Key: key(i)})
	}
	hwDef := &TableDef{Columns: def.Columns}
	got := c.emit(&Event{CommitTs: 77, Def: hwDef, SchemaVersion: 2, TableVersion: 5})
	var want []string
	for i := 1; i <= 40; i++ {
		if !out[key(i)] && !dropped[key(i)] {
			want = append(want, key(i))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("rows %v left out, %v changed: emitted %d rows, want %d", outside, changed, len(got), len(want))
	}
	for i, e := range got {
		if e.Key != want[i] {
			t.Fatalf("row %d is %q, want %q: out of order or the wrong rows", i, e.Key, want[i])
		}
		if e.CommitTs != 77 || e.Def != hwDef || e.SchemaVersion != 2 || e.TableVersion != 5 || e.Op != OpInsert {
			t.Fatalf("row %d is not an insert at the high watermark: %+v", i, e)
		}
	}
}

// A grown chunk's array makes room for the rows the table's statistics
// say it has, at once, and for more as more come, never past the rows
// asked; without statistics it grows fourfold.
func TestAGrownChunksArrayIsMadeForTheTablesRows(t *testing.T) {
	def := &TableDef{Columns: []ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}}}
	grow := func(expect, rows, limit int) []int {
		c := NewChunk("public.t", def, 100)
		c.Rows = make([]Event, 0, 100)
		c.Expect, c.Limit = expect, limit
		caps := []int{}
		for i := 1; i <= rows; i++ {
			if err := c.AddRow([][]byte{[]byte(fmt.Sprint(i))}, []int{0}, "int8"); err != nil {
				t.Fatal(err)
			}
			if n := cap(c.Rows); n != 100 && (len(caps) == 0 || caps[len(caps)-1] != n) {
				caps = append(caps, n)
			}
		}
		if len(c.Rows) != rows || c.Rows[rows-1].Key == "" {
			t.Fatalf("%d rows added, the chunk holds %d", rows, len(c.Rows))
		}
		return caps
	}
	for _, tc := range []struct {
		expect, rows, limit int
		want                []int
	}{
		{800, 800, 10_000, []int{900}},          // the statistics' rows and an eighth
		{800, 1_000, 10_000, []int{900, 3_600}}, // more than they said: fourfold on
		{50_000, 1_000, 10_000, []int{10_000}},  // never past the rows asked
		{0, 1_000, 10_000, []int{400, 1_600}},   // no statistics
		{0, 1_000, 1_000, []int{400, 1_000}},
	} {
		if got := grow(tc.expect, tc.rows, tc.limit); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("statistics of %d rows, %d read, %d asked: the array grew to %v, want %v", tc.expect, tc.rows, tc.limit, got, tc.want)
		}
	}
}

// BenchmarkChunkAddRow measures what building a snapshot chunk's rows
// from the database's text costs the reader, per row: chunks of 40,000
// rows of five columns shaped like BenchmarkSnapshotAgainstCopy's table
// (an int8 key, an md5, a numeric, a timestamptz, a bool). The baseline,
// timed in the same run, copies the same bytes into one buffer (what
// any reader of them must do at least); it reports both and their ratio.
//
//	go test -run '^$' -bench ChunkAddRow -benchtime 20x ./internal/engine/source
func BenchmarkChunkAddRow(b *testing.B) {
	const rows = 40_000
	def := &TableDef{Columns: []ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}, {Name: "v", Type: "text"},
		{Name: "n", Type: "numeric(12,2)"}, {Name: "at", Type: "timestamptz"}, {Name: "flag", Type: "bool"}}}
	raw := make([][][]byte, rows)
	for i := range raw {
		raw[i] = [][]byte{
			[]byte(fmt.Sprint(i + 1)), []byte(fmt.Sprintf("%032x", i*7919)), []byte(fmt.Sprintf("%d.%02d", i/7, i%100)),
			[]byte("2026-12-02 07:30:00.123456+00"), []byte("t"),
		}
	}
	keyIdx, types := []int{0}, "int8"
	var built, copied time.Duration
	sink := make([]byte, 0, 8<<20)
	for i := 0; i < b.N; i++ {
		began := time.Now()
		sink = sink[:0]
		for _, r := range raw {
			for _, v := range r {
				sink = append(sink, v...)
			}
		}
		copied += time.Since(began)
		began = time.Now()
		c := NewChunk("public.snap", def, rows)
		c.Rows = make([]Event, 0, rows)
		for _, r := range raw {
			if err := c.AddRow(r, keyIdx, types); err != nil {
				b.Fatal(err)
			}
		}
		c.Loaded()
		built += time.Since(began)
	}
	n := float64(rows * b.N)
	b.ReportMetric(built.Seconds()*1e9/n, "ns/row")
	b.ReportMetric(copied.Seconds()*1e9/n, "copy-ns/row")
	b.ReportMetric(copied.Seconds()/built.Seconds(), "ratio")
}
