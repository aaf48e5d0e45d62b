package model

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestKeysEncodeInTheirNaturalOrderAndDecodeBack(t *testing.T) {
	ints := []int64{math.MinInt64, -1500, -1, 0, 1, 9, 10, 1500, 3000, math.MaxInt64}
	for i := 1; i < len(ints); i++ {
		a, _ := EncodeKeyValues("int8", []string{itoa(ints[i-1])})
		b, _ := EncodeKeyValues("int8", []string{itoa(ints[i])})
		if !(a < b) {
			t.Fatalf("%d encodes to %q, not below %d's %q", ints[i-1], a, ints[i], b)
		}
		if got := DecodeKey("int8", b); got != itoa(ints[i]) {
			t.Fatalf("%d decodes back to %s", ints[i], got)
		}
	}
	// Composite keys compare column by column: ("a", 9) < ("a", 10) < ("ab", 1).
	keys := [][]string{{"a", "9"}, {"a", "10"}, {"ab", "1"}, {"b", "-5"}}
	prev := ""
	for _, k := range keys {
		enc, err := EncodeKeyValues("text,int4", k)
		if err != nil || enc <= prev {
			t.Fatalf("%v encodes to %q (%v), not above %q", k, enc, err, prev)
		}
		if got := DecodeKey("text,int4", enc); got != strings.Join(k, ",") {
			t.Fatalf("%v decodes back to %s", k, got)
		}
		prev = enc
	}
	// What an operator types.
	if enc, err := EncodeKey("int8", "1500"); err != nil || DecodeKey("int8", enc) != "1500" {
		t.Fatalf("1500: %q %v", enc, err)
	}
	for _, bad := range []struct{ types, key string }{{"int8", "m"}, {"int8", "1.5"}, {"text,int4", "eu"}, {"text,int4", "eu,x"}} {
		if _, err := EncodeKey(bad.types, bad.key); err == nil || !strings.Contains(err.Error(), "does not parse") {
			t.Errorf("%q for (%s): %v", bad.key, bad.types, err)
		}
	}
	// A text column holding commas or quotes is quoted as in CSV, both
	// ways; a plain comma list still splits as before.
	for _, k := range [][]string{{"a,b", "5"}, {`say "hi"`, "7"}, {`x,"y"`, "-1"}} {
		enc, err := EncodeKeyValues("text,int4", k)
		if err != nil {
			t.Fatal(err)
		}
		typed := DecodeKey("text,int4", enc)
		back, err := EncodeKey("text,int4", typed)
		if err != nil || back != enc {
			t.Fatalf("%q shows as %s, which types back to %q (%v)", k, typed, back, err)
		}
	}
	if enc, err := EncodeKey("text,text", "eu,a,b"); err != nil || DecodeKey("text,text", enc) != `eu,"a,b"` {
		t.Fatalf("eu,a,b: %q %v", DecodeKey("text,text", enc), err)
	}
	// Plain text keys (gen) are not encoded.
	if enc, _ := EncodeKey("", "naaa"); enc != "naaa" || DecodeKey("", "naaa") != "naaa" {
		t.Fatal("plain keys changed")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// FuzzKeyOrder: two integer keys and two text keys, in a composite key,
// compare as their values do.
func FuzzKeyOrder(f *testing.F) {
	f.Add(int64(1), int64(2), "a", "b")
	f.Add(int64(-5), int64(5), "ab", "a")
	f.Fuzz(func(t *testing.T, x, y int64, s, u string) {
		if strings.Contains(s, "\x00") || strings.Contains(u, "\x00") {
			return
		}
		a, err1 := EncodeKeyValues("text,int8", []string{s, itoa(x)})
		b, err2 := EncodeKeyValues("text,int8", []string{u, itoa(y)})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		want := strings.Compare(s, u)
		if want == 0 {
			switch {
			case x < y:
				want = -1
			case x > y:
				want = 1
			}
		}
		if got := strings.Compare(a, b); got != want {
			t.Fatalf("(%q,%d) vs (%q,%d): encoded compare %d, values %d", s, x, u, y, got, want)
		}
	})
}

// FuzzKeyText: a composite key shown by DecodeKey, typed back through
// EncodeKey, is the same key.
func FuzzKeyText(f *testing.F) {
	f.Add("a,b", int64(5))
	f.Add(`"q"`, int64(-1))
	f.Add("", int64(0))
	f.Fuzz(func(t *testing.T, s string, x int64) {
		if strings.Contains(s, "\x00") {
			return
		}
		enc, err := EncodeKeyValues("text,int8", []string{s, itoa(x)})
		if err != nil {
			t.Fatal(err)
		}
		typed := DecodeKey("text,int8", enc)
		back, err := EncodeKey("text,int8", typed)
		if err != nil || back != enc {
			t.Fatalf("(%q,%d) shows as %q, types back to %q (%v)", s, x, typed, back, err)
		}
	})
}

func TestDecodeKeyValuesInvertsTheEncoding(t *testing.T) {
	for _, c := range []struct {
		types string
		vals  []string
	}{
		{"int8", []string{"-42"}},
		{"text,int4", []string{"eu,x", "7"}},
		{"text,text", []string{"", "b"}},
	} {
		enc, err := EncodeKeyValues(c.types, c.vals)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeKeyValues(c.types, enc)
		if err != nil || strings.Join(got, "|") != strings.Join(c.vals, "|") {
			t.Fatalf("%s %q: decoded %q, %v", c.types, c.vals, got, err)
		}
	}
	if _, err := DecodeKeyValues("int8", "zz"); err == nil {
		t.Fatal("a key that is not an encoded int8 decoded")
	}
}

func TestCopyProgressIsCutLikeItsSpan(t *testing.T) {
	c := CopyProgress{Rows: 10}.CopiedThrough("m")
	lo, up := c.Cut("g")
	if !lo.Done || lo.Rows != 10 || up.To != "m\x00" || up.Done {
		t.Fatalf("cut below the copied key: %+v %+v", lo, up)
	}
	lo, up = c.Cut("t")
	if lo != c || up != (CopyProgress{}) {
		t.Fatalf("cut above the copied key: %+v %+v", lo, up)
	}
	lo, up = c.Cut("m\x00")
	if !lo.Done || up != (CopyProgress{}) {
		t.Fatalf("cut just after the copied key: %+v %+v", lo, up)
	}
	if after, ok := up.After(); ok {
		t.Fatalf("nothing copied, yet after %q", after)
	}
	if after, _ := c.After(); after != "m" {
		t.Fatalf("after %q", after)
	}
	if !(CopyProgress{Done: true}).Beyond(c) || c.Beyond(CopyProgress{Done: true}) || !c.Beyond(CopyProgress{}) {
		t.Fatal("Beyond orders progress wrongly")
	}
}

// A copy read in the source's index order gives both halves of a split
// its cursor (each reads on from it the rows of its own range), and is
// ordered by the rows it read.
func TestACopyInIndexOrderIsCutWithItsCursor(t *testing.T) {
	c := CopyProgress{Rows: 4, Key: "(sku)"}.ReadThrough("Mb", "o", 10)
	lo, up := c.Cut("g")
	if lo != c || up != (CopyProgress{Key: "(sku)", Cursor: "Mb", Read: 10, Order: "o"}) {
		t.Fatalf("cut: %+v %+v", lo, up)
	}
	next := c.ReadThrough("b", "o", 1)
	if !next.Beyond(c) || c.Beyond(next) || !c.Beyond(CopyProgress{}) || c.Beyond(CopyProgress{Done: true}) {
		t.Fatal("Beyond orders progress in index order wrongly")
	}
	if _, ok := c.After(); ok {
		t.Fatal("a copy in index order says it copied a byte range")
	}
	if by := c.CopiedThrough("m"); by.Cursor != "" || by.Read != 0 || by.Order != "" || !by.Beyond(CopyProgress{}.CopiedThrough("a")) {
		t.Fatalf("a copy gone back to byte ranges: %+v", by)
	}
}

// A copy's key columns go to both halves of a split: a half that has
// copied nothing yet still refuses to copy on under a key moved since.
func TestTheKeyACopyGoesByIsCutWithIt(t *testing.T) {
	c := CopyProgress{Rows: 10, Key: "(x)"}.CopiedThrough("m")
	for _, at := range []string{"g", "m\x00", "t"} {
		lo, up := c.Cut(at)
		if lo.Key != "(x)" || up.Key != "(x)" {
			t.Fatalf("cut at %q: %+v %+v", at, lo, up)
		}
	}
	lo, up := CopyProgress{Done: true, Rows: 4, Key: "(x)"}.Cut("g")
	if !lo.Done || !up.Done || lo.Key != "(x)" || up.Key != "(x)" {
		t.Fatalf("a done copy cut: %+v %+v", lo, up)
	}
	if got := KeyColumns([]string{"y", "x"}); got != "(y, x)" {
		t.Fatalf("KeyColumns = %s", got)
	}
	if KeyColumns([]string{"a, b"}) == KeyColumns([]string{"a", "b"}) || KeyColumns(nil) != "" {
		t.Fatal("KeyColumns confuses keys")
	}
	// A name that is not valid UTF-8 (PostgreSQL's SQL_ASCII database)
	// is quoted, so its stored text, which JSON keeps as is, is still
	// this key's (unquoted, JSON would store U+FFFD, another name's).
	odd := KeyColumns([]string{"a\xffb", "t\tab"})
	b, _ := json.Marshal(CopyProgress{Key: odd})
	var back CopyProgress
	if err := json.Unmarshal(b, &back); err != nil || back.Key != odd || odd == KeyColumns([]string{"a\uFFFDb", "t\tab"}) {
		t.Fatalf("KeyColumns of odd names: %q, stored and read back %q (%v)", odd, back.Key, err)
	}
	// Valid names that do not print are written bare, as records made
	// before invalid UTF-8 was quoted wrote them: those still compare.
	if got := KeyColumns([]string{"t\tab", "a\u3000b", "z\u200bw"}); got != "(t\tab, a\u3000b, z\u200bw)" {
		t.Fatalf("KeyColumns of valid non-printing names = %q, want them bare", got)
	}
	if s := (Span{KeyColumns: "(x)"}); s.CopyKey(CopyProgress{}) != "(x)" || s.CopyKey(CopyProgress{Key: "(y)"}) != "(y)" {
		t.Fatal("CopyKey is not the copy's recorded key, else the span's")
	}
}

// A key of bytes (a MySQL BINARY(16) uuid) may hold any bytes, NULs
// too in a key of one column: it encodes as valid UTF-8 (so a JSON
// string keeps it: a partition's bounds and copy progress in etcd), in
// the bytes' order, decodes to its bytes, and shows as hex that types
// back to the same key. A key of several columns refuses NULs, since a
// NUL joins its columns.
func FuzzAOneColumnKeyHoldsAnyBytes(f *testing.F) {
	f.Add("a\x00b", "a")
	f.Add("\x00", "")
	f.Add("x\x00\x00", "x\x00")
	f.Add("\x7f", "\x80")
	f.Add("\xc3\xbf", "\xff")
	f.Fuzz(func(t *testing.T, s, u string) {
		a, err1 := EncodeKeyValues(BytesKeyType, []string{s})
		b, err2 := EncodeKeyValues(BytesKeyType, []string{u})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !utf8.ValidString(a) {
			t.Fatalf("%q encodes as %q, not UTF-8", s, a)
		}
		if got, want := strings.Compare(a, b), strings.Compare(s, u); got != want {
			t.Fatalf("%q vs %q: encoded compare %d, values %d", s, u, got, want)
		}
		if vals, err := DecodeKeyValues(BytesKeyType, a); err != nil || len(vals) != 1 || vals[0] != s {
			t.Fatalf("%q decodes as %q (%v)", s, vals, err)
		}
		shown := DecodeKey(BytesKeyType, a)
		if s != "" && shown != "0x"+strings.ToUpper(hex.EncodeToString([]byte(s))) {
			t.Fatalf("%q shows as %q", s, shown)
		}
		if back, err := EncodeKey(BytesKeyType, shown); s != "" && (err != nil || back != a) {
			t.Fatalf("%q shows as %q, which types back to %q (%v)", s, shown, back, err)
		}
		if strings.Contains(s, "\x00") {
			if _, err := EncodeKeyValues(BytesKeyType+",int8", []string{s, "1"}); err == nil {
				t.Fatalf("a composite key took %q, which holds a NUL", s)
			}
		} else {
			two, err := EncodeKeyValues(BytesKeyType+",int8", []string{s, "-3"})
			if err != nil {
				t.Fatal(err)
			}
			if back, err := EncodeKey(BytesKeyType+",int8", DecodeKey(BytesKeyType+",int8", two)); s != "" && (err != nil || back != two) {
				t.Fatalf("(%q, -3) shows as %q, types back to %q (%v)", s, DecodeKey(BytesKeyType+",int8", two), back, err)
			}
		}
	})
}

// A bytes key an operator types is hex, and anything else is refused,
// saying how to write it.
func TestABytesKeyIsTypedInHex(t *testing.T) {
	enc, err := EncodeKey(BytesKeyType, "0x8f00Ab")
	if err != nil || enc != "\u008f\x00\u00ab" {
		t.Fatalf("0x8f00Ab encodes as %q (%v)", enc, err)
	}
	for _, bad := range []string{"m", "0x8", "0xzz"} {
		_, err := EncodeKey(BytesKeyType, bad)
		if err == nil || !strings.Contains(err.Error(), "0x") {
			t.Errorf("%q: %v; want a refusal that says to write hex (0x…)", bad, err)
		}
	}
	if _, err := DecodeKeyValues(BytesKeyType, "\u0100"); err == nil {
		t.Error("a character above U+00FF decoded as a byte")
	}
}

// A key's encoding follows its types' kinds: integers of any width, bytes,
// and every other type as text.
func TestSameKeyEncoding(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"int4", "int8", true},
		{"int", "bigint", true},
		{"varchar", "text", true},
		{"text,int4", "varchar,int8", true},
		{"int4", "int4,int4", false},
		{"int4", "text", false},
		{"text", BytesKeyType, false},
		{NoKey, "int4", false},
	} {
		if got := SameKeyEncoding(c.a, c.b); got != c.same {
			t.Errorf("SameKeyEncoding(%q, %q) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

// The copy of partitions attached to a table after its snapshot: a done
// copy starts the first at once, one under way copies them after what
// it copies, each once, in order; a split gives both halves the
// relations still to copy.
func TestAttachedRelationsAreCopiedAfterWhatIsCopying(t *testing.T) {
	done := CopyProgress{Done: true, Rows: 7, Key: "(id)"}
	c := done.Including("16401")
	if c.Done || c.Only != "16401" || c.Then != "" || c.Rows != 7 || c.Key != "(id)" {
		t.Fatalf("a done copy including a relation: %+v", c)
	}
	c = c.CopiedThrough("m").Including("16420").Including("16401").Including("16420").Including("16433")
	if c.Only != "16401" || c.Then != "16420 16433" || c.To != "m\x00" {
		t.Fatalf("relations included while copying: %+v", c)
	}
	lo, up := c.Cut("g")
	if lo.Done || lo.Only != "16420" || lo.Then != "16433" || lo.To != "" || lo.Rows != 7 {
		t.Fatalf("the lower half of a cut below the copied key: %+v", lo)
	}
	if up.Only != "16401" || up.Then != "16420 16433" || up.To != "m\x00" {
		t.Fatalf("the upper half of a cut below the copied key: %+v", up)
	}
	lo, up = c.Cut("t")
	if lo != c || up.Only != "16401" || up.Then != "16420 16433" || up.To != "" {
		t.Fatalf("a cut above the copied key: %+v %+v", lo, up)
	}
	c = c.Finished()
	if c.Done || c.Only != "16420" || c.Then != "16433" || c.To != "" {
		t.Fatalf("the first relation finished: %+v", c)
	}
	if c = c.Finished().Finished(); !c.Done || c.Only != "" || c.Then != "" || c.Rows != 7 {
		t.Fatalf("every relation finished: %+v", c)
	}
	root := CopyProgress{Key: "(id)"}.CopiedThrough("c").Including("16401")
	if root.Only != "" || root.Then != "16401" {
		t.Fatalf("a relation included while the table itself copies: %+v", root)
	}
	if root = root.Finished(); root.Done || root.Only != "16401" {
		t.Fatalf("the table copied, its attached relation next: %+v", root)
	}
}

// The snapshot's summary says when partitions copy what was attached.
func TestTheCopySummaryTellsOfAttachedPartitions(t *testing.T) {
	pt := ProgressTable{"p1": {Copy: CopyProgress{Done: true, Rows: 5}}, "p2": {Copy: CopyProgress{Rows: 7, Only: "16401"}}}
	if got, want := CopySummary(pt), "copying: 1 of 2 partitions done, 12 rows copied; 1 copying rows again that the stream did not carry (a partition attached, a column retyped)"; got != want {
		t.Fatalf("CopySummary = %q, want %q", got, want)
	}
	pt["p2"] = Progress{Copy: CopyProgress{Done: true, Rows: 9}}
	if got := CopySummary(pt); got != "done (14 rows copied)" {
		t.Fatalf("CopySummary = %q", got)
	}
}

// Adds tells a copy with a relation more to copy from one without it.
func TestACopyAddsTheRelationsItHasMore(t *testing.T) {
	done := CopyProgress{Done: true}
	a := done.Including("1")
	for _, c := range []struct {
		c, o CopyProgress
		want bool
	}{
		{a, done, true},
		{a, a, false},
		{a.CopiedThrough("k"), a, false},
		{a.Including("2"), a, true},
		{a.Including("2").Finished(), a.Including("2"), false},
		{CopyProgress{To: "c"}.Including("1"), CopyProgress{To: "c"}, true},
		{done, a, false},
		{CopyProgress{To: "d"}, CopyProgress{To: "c"}, false},
	} {
		if got := c.c.Adds(c.o); got != c.want {
			t.Errorf("%+v Adds %+v = %v, want %v", c.c, c.o, got, c.want)
		}
	}
}

// A table copied again for a change the stream did not carry: at once
// when done, after what it copies otherwise, again when it copies
// itself now, and once per change.
func TestATableIsCopiedAgainOncePerChange(t *testing.T) {
	done := CopyProgress{Done: true, Rows: 9, Key: "(id)"}
	c := done.CopyAgain("16384", 100)
	if c.Done || c.Only != "16384" || c.Then != "" || c.Again != 100 || c.Rows != 9 {
		t.Fatalf("a done copy copies the table again: %+v", c)
	}
	if again := c.CopyAgain("16384", 100); again != c {
		t.Fatalf("the same change marked twice: %+v", again)
	}
	if again := c.CopyAgain("16384", 90); again != c {
		t.Fatalf("an earlier change marked after: %+v", again)
	}
	half := c.CopiedThrough("m")
	next := half.CopyAgain("16384", 200)
	if next.Only != "16384" || next.Then != "16384" || next.To != "m\x00" || next.Again != 200 {
		t.Fatalf("a change while the table copies again: copied again after: %+v", next)
	}
	if twice := next.CopyAgain("16384", 300); twice.Then != "16384" || twice.Again != 300 {
		t.Fatalf("a third change before the second copy began: %+v", twice)
	}
	first := CopyProgress{Key: "(id)"}.CopiedThrough("c").CopyAgain("16384", 100)
	if first.Only != "" || first.Then != "16384" || first.To != "c\x00" {
		t.Fatalf("a change while the initial snapshot copies: %+v", first)
	}
	if !first.Adds(CopyProgress{Key: "(id)"}.CopiedThrough("c")) || !c.Adds(done) || !next.Adds(half) {
		t.Fatalf("a copy begun again is not told as one to save")
	}
}

// A copy's horizon (the span's last key when it began) goes to both
// halves of a split, and is forgotten when the copy reads another
// relation or the table again: their rows were never the stream's.
func TestACopysHorizonIsCutWithItAndEndsWithItsRelation(t *testing.T) {
	c := CopyProgress{Rows: 10, Key: "(id)", Horizon: "w"}.CopiedThrough("m")
	for _, at := range []string{"g", "m\x00", "t", "z"} {
		lo, up := c.Cut(at)
		if !lo.Done && lo.Horizon != "w" || up.Horizon != "w" {
			t.Fatalf("cut at %q: %+v %+v", at, lo, up)
		}
	}
	if c.CopiedThrough("p").Horizon != "w" || c.ReadThrough("p", "o", 1).Horizon != "w" {
		t.Fatal("a chunk copied lost the horizon")
	}
	attached := c.Including("16401")
	if attached.Horizon != "w" {
		t.Fatalf("the table's own copy lost its horizon when a relation was attached: %+v", attached)
	}
	if next := attached.Finished(); next.Only != "16401" || next.Horizon != "" {
		t.Fatalf("the attached relation's copy began with the table's horizon: %+v", next)
	}
	if again := (CopyProgress{Done: true, Horizon: "w"}).CopyAgain("16384", 9); again.Done || again.Horizon != "" {
		t.Fatalf("a copy begun again kept the horizon of the copy before: %+v", again)
	}
	// The relation being copied attached again (detached, written and
	// attached: rows the stream never carried, keyed anywhere) is copied
	// again after this pass, which keeps its horizon; the next pass reads
	// one of its own. The change is saved at once (Adds), and once.
	copying := CopyProgress{Only: "16401", Then: "16420", Horizon: "w"}.CopiedThrough("m")
	re := copying.Attached("16401", 50)
	if re.Horizon != "w" || re.Only != "16401" || re.To != "m\x00" || re.Then != "16420 16401" || re.Reattached != 50 || re.Again != 0 || !re.Adds(copying) {
		t.Fatalf("the relation being copied, attached again: %+v", re)
	}
	if twice := re.Attached("16401", 50); twice != re {
		t.Fatalf("the same attach met again: %+v", twice)
	}
	// Both halves of a split remember the marks met.
	if lo, up := re.Cut("c"); lo.Reattached != 50 || up.Reattached != 50 || up.Attached("16401", 50) != up {
		t.Fatalf("the halves of a split forgot the attach: %+v %+v", lo, up)
	}
	if other := copying.Attached("16433", 60); other.Then != "16420 16433" || other.Reattached != 0 {
		t.Fatalf("another relation attached: %+v", other)
	}
	if next := re.Finished().Finished(); next.Only != "16401" || next.To != "" || next.Horizon != "" || next.Done {
		t.Fatalf("the second pass of the relation attached again: %+v", next)
	}
	if same := copying.Including("16401"); same != copying {
		t.Fatalf("Including the relation being copied: %+v", same)
	}
	if other := copying.Including("16433"); other.Horizon != "w" {
		t.Fatalf("another relation attached: the copy lost its horizon: %+v", other)
	}
	// A horizon in an index's order means nothing in byte ranges.
	ordered := CopyProgress{Key: "(sku)", Horizon: "zz"}.ReadThrough("Mb", "o", 10)
	if ordered.Horizon != "zz" || ordered.CopiedThrough("b").Horizon != "" {
		t.Fatalf("a horizon in index order kept or lost wrongly: %+v", ordered)
	}
}
