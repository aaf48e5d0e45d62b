package gen

import (
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

const start = int64(1_800_000_000_000)

func newGen(t testing.TB, uri string) *Generator {
	t.Helper()
	cfg, err := ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StartMillis == 0 {
		cfg.StartMillis = start
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func readAll(t testing.TB, g *Generator, span model.Span, from, upTo model.Ts, batch int) []source.Event {
	t.Helper()
	r, err := g.Open(span, from)
	if err != nil {
		t.Fatal(err)
	}
	var out []source.Event
	for {
		evs := sourcetest.Read(t, r, upTo, batch)
		if len(evs) == 0 {
			break
		}
		out = append(out, evs...)
	}
	if r.Position() != upTo {
		t.Fatalf("position %v after reading everything, want %v", r.Position(), upTo)
	}
	return out
}

func at(sec float64) model.Ts { return model.TsFromMillis(start + int64(sec*1000)) }

func TestParseURI(t *testing.T) {
	c, err := ParseURI("gen://?tables=3&keys=500&rate=100&ddl_every=2s&seed=7&start=1800000000000")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Tables: 3, Keys: 500, Rate: 100, DDLEvery: 2 * time.Second, Seed: 7, StartMillis: 1800000000000}
	if c != want {
		t.Fatalf("got %+v", c)
	}
	if back, err := ParseURI(c.URI()); err != nil || back != c {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if d, err := ParseURI("gen://"); err != nil || d != defaults {
		t.Fatalf("defaults: %+v %v", d, err)
	}
	for uri, mention := range map[string]string{
		"kafka://x":                "scheme must be gen://",
		"gen://?tabels=3":          "unknown parameter(s) tabels",
		"gen://?tables=0":          "tables",
		"gen://?keys=abc":          "keys",
		"gen://?rate=-1":           "rate",
		"gen://?ddl_every=soon":    "ddl_every",
		"gen://?tables=1&tables=2": "given 2 times",
		"gen://host/path":          "only query parameters",
		"gen://?keys=2000000":      "between 1 and 1000000",
		"gen://?start=-5":          "positive Unix time",
		"gen://?ddl_every=1us":     "at least 1ms",
	} {
		if _, err := ParseURI(uri); err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("ParseURI(%q) = %v, want an error mentioning %q", uri, err, mention)
		}
	}
}

func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"gen://", "gen://?tables=8&keys=10000&rate=2000&ddl_every=30s&seed=1", "gen://?x=1", "gen://?rate=1e309", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		c, err := ParseURI(uri)
		if err != nil {
			return
		}
		if c.Tables < 1 || c.Keys < 1 || !(c.Rate > 0) {
			t.Fatalf("%q accepted as %+v", uri, c)
		}
		back, err := ParseURI(c.URI())
		if err != nil || back != c {
			t.Fatalf("%q: round trip %+v → %+v (%v)", uri, c, back, err)
		}
	})
}

func TestKeysSortAndSplitNearTheMiddle(t *testing.T) {
	g := newGen(t, "gen://?keys=10000")
	prev := ""
	below := 0
	for i := 0; i < 10000; i++ {
		k := g.Key(i)
		if k <= prev {
			t.Fatalf("key %d %q does not sort after %q", i, k, prev)
		}
		if idx, ok := g.KeyIndex(k); !ok || idx != i {
			t.Fatalf("KeyIndex(%q) = %d %v", k, idx, ok)
		}
		if k < "m" {
			below++
		}
		prev = k
	}
	if below < 4000 || below > 6000 {
		t.Fatalf("%d of 10000 keys sort below %q; want about half", below, "m")
	}
	if _, ok := g.KeyIndex("aaab"); ok {
		t.Fatal(`"aaab" is not a generated key but KeyIndex found it`)
	}
	b := g.KeyBoundaries(4)
	if len(b) != 3 || !sort.StringsAreSorted(b) {
		t.Fatalf("boundaries %v", b)
	}
}

func TestReadingIsDeterministicAndResumable(t *testing.T) {
	g := newGen(t, "gen://?tables=2&keys=200&rate=400&seed=3")
	span := model.Span{Table: "t0002", Start: "d", End: "p"}
	a := readAll(t, g, span, at(0), at(5), 1000)
	b := readAll(t, g, span, at(0), at(5), 1000)
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("two reads differ (%d vs %d events)", len(a), len(b))
	}
	// Small batches, and reopening from Position between them, give the
	// same stream: nothing lost or repeated at the seams.
	var pieces []source.Event
	pos := at(0)
	for {
		r, err := g.Open(span, pos)
		if err != nil {
			t.Fatal(err)
		}
		evs := sourcetest.Read(t, r, at(5), 7)
		if len(evs) == 0 {
			break
		}
		pieces = append(pieces, evs...)
		pos = r.Position()
	}
	if !reflect.DeepEqual(a, pieces) {
		t.Fatalf("resumed stream differs: %d vs %d events", len(a), len(pieces))
	}
	for _, e := range a {
		if !span.Contains(e.Key) || e.Table != "t0002" {
			t.Fatalf("event outside the span: %+v", e)
		}
	}
}

func TestPartitionsTogetherAreTheWholeTable(t *testing.T) {
	g := newGen(t, "gen://?tables=1&keys=300&rate=600")
	whole := readAll(t, g, model.Span{Table: "t0001"}, at(0), at(4), 50)
	var parts []source.Event
	for _, sp := range model.SplitEvenly("t0001", 4, func(i int) string { return g.KeyBoundaries(4)[i-1] }) {
		parts = append(parts, readAll(t, g, sp, at(0), at(4), 50)...)
	}
	sort.SliceStable(parts, func(i, j int) bool {
		if parts[i].CommitTs != parts[j].CommitTs {
			return parts[i].CommitTs < parts[j].CommitTs
		}
		return parts[i].Key < parts[j].Key
	})
	if !reflect.DeepEqual(whole, parts) {
		t.Fatalf("4 partitions gave %d events, the whole table %d", len(parts), len(whole))
	}
}

func TestVersionsAreConsecutiveAndMatchCount(t *testing.T) {
	g := newGen(t, "gen://?tables=1&keys=100&rate=500")
	upTo := at(3)
	evs := readAll(t, g, model.Span{Table: "t0001"}, 0, upTo, 64)
	last := map[string]source.Event{}
	total := 0
	for _, e := range evs {
		p, seen := last[e.Key]
		if (!seen && Version(&e) != 1) || (seen && (Version(&e) != Version(&p)+1 || e.CommitTs <= p.CommitTs)) {
			t.Fatalf("key %s: version %d at %v after %d at %v", e.Key, Version(&e), e.CommitTs, Version(&p), p.CommitTs)
		}
		if e.CommitTs <= at(0) || e.CommitTs > upTo {
			t.Fatalf("event at %v outside (start, upTo]", e.CommitTs)
		}
		last[e.Key] = e
		total++
	}
	sum := uint64(0)
	for i := 0; i < 100; i++ {
		n, ok := g.Count("t0001", g.Key(i), upTo)
		if !ok || n != Version(ptr(last[g.Key(i)])) {
			t.Fatalf("Count(%s) = %d, read %d", g.Key(i), n, Version(ptr(last[g.Key(i)])))
		}
		sum += n
	}
	if int(sum) != total {
		t.Fatalf("counts sum to %d, read %d", sum, total)
	}
	// The rate is honoured on average: 500/s for 3s.
	if total < 1000 || total > 2000 {
		t.Fatalf("%d events in 3s at rate 500", total)
	}
}

func TestDDLAndSchemaVersions(t *testing.T) {
	g := newGen(t, "gen://?tables=1&keys=50&rate=1000&ddl_every=1s")
	ddls := g.DDLs("t0001", 0, at(3.5))
	if len(ddls) != 3 || ddls[0].SchemaVersion != 1 || ddls[2].SchemaVersion != 3 || !strings.Contains(ddls[1].Statement, "c2") {
		t.Fatalf("ddls %+v", ddls)
	}
	if again := g.DDLs("t0001", ddls[0].CommitTs, at(3.5)); len(again) != 2 {
		t.Fatalf("DDLs after the first: %d", len(again))
	}
	for _, e := range readAll(t, g, model.Span{Table: "t0001"}, 0, at(3.5), 100) {
		// A row is written under every DDL that committed before it.
		want := uint64(0)
		for _, d := range ddls {
			if d.CommitTs < e.CommitTs {
				want = d.SchemaVersion
			}
		}
		if e.SchemaVersion != want || len(e.New) != 3+int(want) || len(e.Def.Columns) != len(e.New) {
			t.Fatalf("row at %v: schema %d with %d columns, want schema %d", e.CommitTs, e.SchemaVersion, len(e.New), want)
		}
	}
}

func TestOpenRefusesUnknownTables(t *testing.T) {
	g := newGen(t, "gen://?tables=2")
	for _, tbl := range []string{"t0003", "users", "t0000"} {
		if _, err := g.Open(model.Span{Table: tbl}, 0); err == nil {
			t.Errorf("Open(%s) accepted", tbl)
		}
	}
}

func ptr(e source.Event) *source.Event { return &e }

func TestDeletesAndReinserts(t *testing.T) {
	g := newGen(t, "gen://?tables=1&keys=20&rate=400&deletes=3")
	evs := readAll(t, g, model.Span{Table: "t0001"}, 0, at(3), 64)
	ops := map[source.Op]int{}
	for i := range evs {
		e := &evs[i]
		n := Version(e)
		want := source.OpUpdate
		switch {
		case n%3 == 0:
			want = source.OpDelete
		case n == 1 || (n-1)%3 == 0:
			want = source.OpInsert
		}
		if e.Op != want {
			t.Fatalf("%s change %d is %v, want %v", e.Key, n, e.Op, want)
		}
		switch e.Op {
		case source.OpDelete:
			if e.New != nil || e.Old[1].Text != strconv.FormatUint(n-1, 10) {
				t.Fatalf("delete %s/%d: new %v old %v", e.Key, n, e.New, e.Old)
			}
		case source.OpUpdate:
			if e.Old[1].Text != strconv.FormatUint(n-1, 10) || e.New[1].Text != strconv.FormatUint(n, 10) {
				t.Fatalf("update %s/%d: new %v old %v", e.Key, n, e.New, e.Old)
			}
		case source.OpInsert:
			if e.Old != nil {
				t.Fatalf("insert %s/%d has an old row", e.Key, n)
			}
		}
		ops[e.Op]++
	}
	if ops[source.OpInsert] == 0 || ops[source.OpUpdate] == 0 || ops[source.OpDelete] == 0 {
		t.Fatalf("ops %v: want all three", ops)
	}
}
