package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
	"unicode/utf8"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// reference is canalRow through encoding/json: what the hand-written
// encoder must reproduce byte for byte.
func reference(t testing.TB, db, table string, e *source.Event, img []source.Value) string {
	data := map[string]*string{}
	sqlType := map[string]int{}
	mysqlType := map[string]string{}
	for i, c := range e.Def.Columns {
		if img[i].Unchanged {
			continue
		}
		ty := typeIn(e.Def.Dialect, c.Type)
		data[c.Name] = canalValue(ty, img[i])
		sqlType[c.Name], mysqlType[c.Name] = ty.sqlType, ty.mysqlType
	}
	var old []map[string]*string
	if e.Op == source.OpUpdate && len(e.Old) == len(img) {
		changed := map[string]*string{}
		for i, c := range e.Def.Columns {
			o, n := e.Old[i], img[i]
			if o.Unchanged || n.Unchanged || (o.Null == n.Null && o.Text == n.Text) {
				continue
			}
			changed[c.Name] = canalValue(typeIn(e.Def.Dialect, c.Type), o)
		}
		old = []map[string]*string{changed}
	}
	ms := e.CommitTs.Millis()
	var cdc *canalCDC
	for i, c := range e.Def.Columns {
		if img[i].Unchanged {
			if cdc == nil {
				cdc = &canalCDC{}
			}
			cdc.Absent = append(cdc.Absent, c.Name)
		}
	}
	var txn *canalTxn
	if e.TxnOrder > 0 {
		txn = &canalTxn{ID: fmt.Sprint(uint64(e.CommitTs)), TotalOrder: e.TxnOrder, DataCollectionOrder: e.TxnTableOrder}
	}
	b, err := json.Marshal(canalRow{
		Database: db, Table: table, PkNames: e.Def.KeyNames(), Type: e.Op.String(), Es: ms, Ts: ms,
		SQLType: sqlType, MySQLType: mysqlType, Data: []map[string]*string{data}, Old: old,
		TiDB: canalTiDB{CommitTs: uint64(e.CommitTs)}, CDC: cdc, Transaction: txn,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// canalValue is a value in canal-json: a MySQL BIT's number in decimal,
// a binary column's bytes as ISO-8859-1 characters.
func canalValue(ty columnType, v source.Value) *string {
	t := textOrNull(v)
	if t == nil {
		return nil
	}
	if w := bitWidth(ty.mysqlType); w > 0 {
		if n, ok := bitsText(*t); ok {
			return &n
		}
		l := model.Latin1(*t)
		return &l
	}
	if bytesType(ty.sqlType) {
		l := model.Latin1(*t)
		return &l
	}
	return t
}

var nasty = []string{"", "plain", `q"uote`, `back\slash`, "<a&b>", "tab\tnl\ncr\r", "\b\f\x00\x1f\x7f", "é ü 日本", "\u2028\u2029", "bad\xffutf8", "\xe2\x28\xa1"}

func TestCanalEncoderMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	types := []string{"int8", "text", "numeric(10,2)", "bool", "_int4", "varchar(16)", "jsonb", "bytea", "timestamptz", "mystery"}
	for n := 0; n < 2000; n++ {
		cols := 1 + rng.Intn(8)
		def := &source.TableDef{Schema: nasty[rng.Intn(len(nasty))], Name: "t" + nasty[rng.Intn(len(nasty))]}
		for i := 0; i < cols; i++ {
			cd := source.ColumnDef{Name: string(rune('z'-i)) + nasty[rng.Intn(len(nasty))], Type: types[rng.Intn(len(types))]}
			if rng.Intn(3) == 0 {
				cd.KeyPos = len(def.KeyNames()) + 1
			}
			def.Columns = append(def.Columns, cd)
		}
		val := func() source.Value {
			switch rng.Intn(6) {
			case 0:
				return source.Null
			case 1:
				return source.Value{Unchanged: true}
			}
			return source.Text(nasty[rng.Intn(len(nasty))])
		}
		row := func() []source.Value {
			vs := make([]source.Value, cols)
			for i := range vs {
				vs[i] = val()
			}
			return vs
		}
		e := source.Event{Kind: source.KindDML, Def: def, Op: source.Op(1 + rng.Intn(3)), CommitTs: model.Ts(rng.Uint64() >> 1), New: row()}
		if rng.Intn(2) == 0 {
			e.Old = row()
		}
		if rng.Intn(2) == 0 {
			e.TxnOrder, e.TxnTableOrder = 1+uint32(rng.Intn(1<<20)), 1+uint32(rng.Intn(100))
		}
		img := e.New
		if e.Op == source.OpDelete {
			img = e.Old
			if img == nil {
				img = row()
			}
		}
		db, table := nasty[rng.Intn(len(nasty))], "x"+nasty[rng.Intn(len(nasty))]
		got, want := string(appendCanalRow(nil, db, table, &e, img)), reference(t, db, table, &e, img)
		if got != want {
			t.Fatalf("row %d:\n got %s\nwant %s", n, got, want)
		}
	}
}

func FuzzJSONString(f *testing.F) {
	for _, s := range nasty {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}

func textOrNull(v source.Value) *string {
	if v.Null {
		return nil
	}
	s := v.Text
	return &s
}

// Every DDL makes a new table definition: the layouts cached for the
// canal encoder stay bounded however many there have been.
func TestCanalLayoutsStayBounded(t *testing.T) {
	for i := range maxLayouts + 100 {
		def := &row.TableDef{Name: "t", Columns: []row.ColumnDef{{Name: "id", Type: "int8", KeyPos: 1}, {Name: fmt.Sprint("c", i), Type: "text"}}}
		if l := layoutOf(def); len(l.order) != 2 {
			t.Fatalf("layout of %d columns: %+v", len(def.Columns), l)
		}
	}
	n := 0
	layouts.Range(func(any, any) bool { n++; return true })
	if n > maxLayouts {
		t.Fatalf("%d layouts cached after %d definitions; want at most %d", n, maxLayouts+100, maxLayouts)
	}
}

// A binary column's bytes (MySQL's BINARY, VARBINARY, BLOB) go through
// canal-json as they are: written one ISO-8859-1 character a byte, as
// Canal writes them, and read back into the same bytes. A JSON string
// holds only UTF-8; written as they were, bytes that are not became
// U+FFFD. Text columns are written as before.
func FuzzBinaryValuesSurviveCanalJSON(f *testing.F) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	f.Add(string(all), "é")
	f.Add("\xf0\x03", "plain")
	f.Add("", "\xff")
	f.Fuzz(func(t *testing.T, bin, text string) {
		def := &source.TableDef{Schema: "s", Name: "t", Dialect: row.DialectMySQL, Columns: []source.ColumnDef{
			{Name: "k", Type: "binary(16)", KeyPos: 1}, {Name: "b", Type: "blob"}, {Name: "t", Type: "varchar(20)"},
		}}
		e := source.Event{Kind: source.KindDML, Op: source.OpUpdate, Table: "s.t", Def: def, CommitTs: 9,
			New: []source.Value{source.Text(bin), source.Text(bin + "1"), source.Text(text)},
			Old: []source.Value{source.Text(bin), source.Text(bin + "0"), source.Text(text)}}
		var buf bytes.Buffer
		if err := EncodeRow(&buf, ProtocolCanalJSON, "", &e); err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(buf.Bytes()) {
			t.Fatalf("%q is not UTF-8", buf.String())
		}
		chs, err := DecodeChanges(ProtocolCanalJSON, buf.Bytes())
		if err != nil || len(chs) != 1 {
			t.Fatalf("%q: %d changes, %v", buf.String(), len(chs), err)
		}
		c := chs[0]
		if c.Key() != bin || *c.Data["b"] != bin+"1" || *c.Old["b"] != bin+"0" {
			t.Fatalf("%q read back as key %q, b %q (old %q); want %q", buf.String(), c.Key(), *c.Data["b"], *c.Old["b"], bin)
		}
		// Text as encoding/json writes it: a byte that is not UTF-8 as U+FFFD.
		quoted, _ := json.Marshal(text)
		var want string
		if err := json.Unmarshal(quoted, &want); err != nil {
			t.Fatal(err)
		}
		if *c.Data["t"] != want {
			t.Fatalf("text %q read back as %q, want %q", text, *c.Data["t"], want)
		}
	})
}

// A MySQL BIT(n) value (its bytes, big-endian) goes into canal-json as
// Canal writes it, its number in decimal, and is read back into the same
// bytes by its column's width (a byte of 0x80 or more was U+FFFD, lost);
// PostgreSQL's bit, whose text is its 0s and 1s, is described as text and
// stays as it is.
func FuzzBitValuesSurviveCanalJSON(f *testing.F) {
	f.Add(uint8(1), uint64(1))
	f.Add(uint8(8), uint64(0xff))
	f.Add(uint8(64), uint64(1<<63|5))
	f.Add(uint8(12), uint64(0x0801))
	f.Fuzz(func(t *testing.T, width uint8, u uint64) {
		w := int(width%64) + 1
		if w < 64 {
			u &= 1<<uint(w) - 1
		}
		raw := make([]byte, (w+7)/8)
		for i, v := len(raw)-1, u; i >= 0; i, v = i-1, v>>8 {
			raw[i] = byte(v)
		}
		def := &source.TableDef{Schema: "s", Name: "t", Dialect: row.DialectMySQL, Columns: []source.ColumnDef{
			{Name: "k", Type: "int(11)", KeyPos: 1}, {Name: "b", Type: fmt.Sprintf("bit(%d)", w)},
		}}
		e := source.Event{Kind: source.KindDML, Op: source.OpUpdate, Table: "s.t", Def: def, CommitTs: 9,
			New: []source.Value{source.Text("1"), source.Text(string(raw))}, Old: []source.Value{source.Text("1"), source.Text("\x00")}}
		var buf bytes.Buffer
		if err := EncodeRow(&buf, ProtocolCanalJSON, "", &e); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(buf.Bytes(), []byte(fmt.Sprintf(`"b":"%d"`, u))) {
			t.Fatalf("BIT(%d) %d written as %s", w, u, buf.Bytes())
		}
		chs, err := DecodeChanges(ProtocolCanalJSON, buf.Bytes())
		if err != nil || len(chs) != 1 {
			t.Fatalf("%q: %d changes, %v", buf.String(), len(chs), err)
		}
		if got := *chs[0].Data["b"]; got != string(raw) {
			t.Fatalf("BIT(%d) %x read back as %x from %s", w, raw, got, buf.Bytes())
		}
		var std canalChange
		if err := json.Unmarshal(buf.Bytes(), &std); err != nil {
			t.Fatal(err)
		}
		unLatin1(&std)
		if got := *std.Data[0]["b"]; got != string(raw) {
			t.Fatalf("BIT(%d) %x read back by encoding/json as %x", w, raw, got)
		}
	})
}

func TestAPostgreSQLBitIsText(t *testing.T) {
	def := &source.TableDef{Schema: "s", Name: "t", Columns: []source.ColumnDef{{Name: "k", Type: "int4", KeyPos: 1}, {Name: "b", Type: "bit(8)"}}}
	e := source.Event{Kind: source.KindDML, Op: source.OpInsert, Table: "s.t", Def: def, CommitTs: 9,
		New: []source.Value{source.Text("1"), source.Text("01010101")}}
	var buf bytes.Buffer
	if err := EncodeRow(&buf, ProtocolCanalJSON, "", &e); err != nil {
		t.Fatal(err)
	}
	chs, err := DecodeChanges(ProtocolCanalJSON, buf.Bytes())
	if err != nil || len(chs) != 1 || *chs[0].Data["b"] != "01010101" || !bytes.Contains(buf.Bytes(), []byte(`"b":"text"`)) {
		t.Fatalf("%s read back as %+v (%v)", buf.Bytes(), chs, err)
	}
}
