package codec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// orders is a PostgreSQL-like table: a composite key, typed columns, a
// nullable one.
var orders = &source.TableDef{Schema: "shop", Name: "orders", Columns: []source.ColumnDef{
	{Name: "region", Type: "text", KeyPos: 2},
	{Name: "id", Type: "int8", KeyPos: 1},
	{Name: "amount", Type: "numeric(10,2)", Nullable: true},
	{Name: "paid", Type: "bool"},
	{Name: "tags", Type: "_text", Nullable: true},
}}

func canal(t *testing.T, e *source.Event) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	if err := EncodeRow(&buf, ProtocolCanalJSON, "sinkdb", e); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(buf.Bytes(), []byte("\n")) || bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("want one line, got %q", buf.String())
	}
	var m map[string]any
	dec := json.NewDecoder(&buf)
	dec.UseNumber() // a commit ts needs all 64 bits
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestCanalJSONFromTheTableDefinition(t *testing.T) {
	ts := model.TsFromMillis(1_800_000_000_123).WithLogical(2)
	row := []source.Value{source.Text("eu"), source.Text("42"), source.Null, source.Text("t"), source.Text(`{a,"b c"}`)}
	paid := []source.Value{source.Text("eu"), source.Text("42"), source.Text("9.50"), source.Text("t"), source.Text(`{a,"b c"}`)}

	for _, tc := range []struct {
		name               string
		e                  source.Event
		typ, data, old, pk string
	}{
		{"insert with a NULL", source.Event{Op: source.OpInsert, New: row},
			"INSERT", `[{"amount":null,"id":"42","paid":"t","region":"eu","tags":"{a,\"b c\"}"}]`, `null`, `["id","region"]`},
		{"update: old holds the changed columns as they were", source.Event{Op: source.OpUpdate, New: paid, Old: row},
			"UPDATE", `[{"amount":"9.50","id":"42","paid":"t","region":"eu","tags":"{a,\"b c\"}"}]`, `[{"amount":null}]`, `["id","region"]`},
		{"update without the old row", source.Event{Op: source.OpUpdate, New: paid},
			"UPDATE", `[{"amount":"9.50","id":"42","paid":"t","region":"eu","tags":"{a,\"b c\"}"}]`, `null`, `["id","region"]`},
		{"delete shows the deleted row", source.Event{Op: source.OpDelete, Old: paid},
			"DELETE", `[{"amount":"9.50","id":"42","paid":"t","region":"eu","tags":"{a,\"b c\"}"}]`, `null`, `["id","region"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.e
			e.Kind, e.Table, e.Def, e.CommitTs, e.Key = source.KindDML, "shop.orders", orders, ts, "42,eu"
			m := canal(t, &e)
			if m["type"] != tc.typ || jsonOf(m["data"]) != tc.data || jsonOf(m["old"]) != tc.old || jsonOf(m["pkNames"]) != tc.pk {
				t.Fatalf("got type %v data %s old %s pk %s", m["type"], jsonOf(m["data"]), jsonOf(m["old"]), jsonOf(m["pkNames"]))
			}
			if m["database"] != "shop" || m["table"] != "orders" {
				t.Fatalf("names %v.%v, want the upstream's shop.orders", m["database"], m["table"])
			}
			if got := m["_tidb"].(map[string]any)["commitTs"].(json.Number).String(); got != strconv.FormatUint(uint64(ts), 10) {
				t.Fatalf("commitTs %v, want %d", got, ts)
			}
			if m["es"].(json.Number).String() != "1800000000123" {
				t.Fatalf("es %v", m["es"])
			}
			if jsonOf(m["mysqlType"]) != `{"amount":"decimal(10,2)","id":"bigint","paid":"tinyint(1)","region":"text","tags":"text"}` ||
				jsonOf(m["sqlType"]) != `{"amount":3,"id":-5,"paid":16,"region":2005,"tags":2003}` {
				t.Fatalf("types %s %s", jsonOf(m["mysqlType"]), jsonOf(m["sqlType"]))
			}
		})
	}
}

// A MySQL row's columns are described as Canal describes MySQL's: each
// column's own type as the server shows it, and the java.sql.Types code
// of its base type.
func TestAMySQLRowKeepsItsColumnTypes(t *testing.T) {
	def := &source.TableDef{Schema: "shop", Name: "items", Dialect: source.DialectMySQL, Columns: []source.ColumnDef{
		{Name: "id", Type: "bigint(20) unsigned", KeyPos: 1}, {Name: "qty", Type: "int(11)"}, {Name: "at", Type: "timestamp(6)"},
		{Name: "state", Type: "enum('new','paid')"}, {Name: "note", Type: "mediumtext"}, {Name: "raw", Type: "varbinary(8)"}, {Name: "pt", Type: "point"},
	}}
	vals := []source.Value{source.Text("1"), source.Text("2"), source.Text("2026-11-28 10:00:00.000001"), source.Text("paid"), source.Null, source.Text("x"), source.Null}
	e := source.Event{Kind: source.KindDML, Op: source.OpInsert, Table: "shop.items", Def: def, CommitTs: 1, Key: "1", New: vals}
	m := canal(t, &e)
	if got := jsonOf(m["mysqlType"]); got != `{"at":"timestamp(6)","id":"bigint(20) unsigned","note":"mediumtext","pt":"point","qty":"int(11)","raw":"varbinary(8)","state":"enum('new','paid')"}` {
		t.Fatalf("mysqlType %s", got)
	}
	if got := jsonOf(m["sqlType"]); got != `{"at":93,"id":-5,"note":2005,"pt":-2,"qty":4,"raw":-3,"state":4}` {
		t.Fatalf("sqlType %s", got)
	}
}

func TestUnchangedToastValuesAreLeftOut(t *testing.T) {
	e := source.Event{Kind: source.KindDML, Op: source.OpUpdate, Table: "shop.orders", Def: orders,
		New: []source.Value{source.Text("eu"), source.Text("1"), source.Text("2"), source.Text("f"), {Unchanged: true}}}
	m := canal(t, &e)
	if _, has := m["data"].([]any)[0].(map[string]any)["tags"]; has {
		t.Fatalf("an unchanged TOAST value was written: %s", jsonOf(m["data"]))
	}
	// The consumer is told, in the message, which columns were not sent.
	if got := jsonOf(m["_cdcctl"]); got != `{"absent":["tags"]}` {
		t.Fatalf("_cdcctl: %s", got)
	}
}

func TestCSVOperationsAndNulls(t *testing.T) {
	var buf bytes.Buffer
	row := []source.Value{source.Text("eu"), source.Text("42"), source.Null, source.Text("t"), source.Text("a,b")}
	for _, e := range []source.Event{
		{Op: source.OpInsert, New: row},
		{Op: source.OpUpdate, New: row, Old: row},
		{Op: source.OpDelete, Old: row},
	} {
		e.Kind, e.Table, e.Def, e.CommitTs = source.KindDML, "shop.orders", orders, 7
		if err := EncodeRow(&buf, ProtocolCSV, "sinkdb", &e); err != nil {
			t.Fatal(err)
		}
	}
	want := "I,orders,shop,7,eu,42,\\N,t,\"a,b\"\nU,orders,shop,7,eu,42,\\N,t,\"a,b\"\nD,orders,shop,7,eu,42,\\N,t,\"a,b\"\n"
	if buf.String() != want {
		t.Fatalf("csv:\n%s\nwant:\n%s", buf.String(), want)
	}
	// An unchanged TOASTed value is the marker, never an empty string
	// (which the next row's real '' is).
	buf.Reset()
	for _, last := range []source.Value{{Unchanged: true}, source.Text("")} {
		e := source.Event{Kind: source.KindDML, Op: source.OpUpdate, Table: "shop.orders", Def: orders, CommitTs: 8,
			New: []source.Value{source.Text("eu"), source.Text("42"), source.Null, source.Text("t"), last}}
		if err := EncodeRow(&buf, ProtocolCSV, "sinkdb", &e); err != nil {
			t.Fatal(err)
		}
	}
	want = "U,orders,shop,8,eu,42,\\N,t," + CSVUnchanged + "\nU,orders,shop,8,eu,42,\\N,t,\n"
	if buf.String() != want {
		t.Fatalf("csv with an unchanged value:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestARowWithoutItsDefinitionIsRefused(t *testing.T) {
	var buf bytes.Buffer
	e := source.Event{Kind: source.KindDML, Op: source.OpInsert, Table: "t", New: []source.Value{source.Text("x")}}
	if err := EncodeRow(&buf, ProtocolCanalJSON, "s", &e); err == nil {
		t.Fatal("a row without a table definition was encoded")
	}
	e.Def = orders
	if err := EncodeRow(&buf, ProtocolCanalJSON, "s", &e); err == nil || !strings.Contains(err.Error(), "1 values for 5 columns") {
		t.Fatalf("a short row: %v", err)
	}
}

// A gen row survives the round trip through both protocols, a delete
// counting as the change after the row it carries.
func TestGenRowsRoundTrip(t *testing.T) {
	def := &source.TableDef{Name: "t0001", Columns: []source.ColumnDef{
		{Name: "id", Type: "varchar(16)", KeyPos: 1}, {Name: "version", Type: "int8"}, {Name: "value", Type: "varchar(32)"}}}
	img := func(v string) []source.Value {
		return []source.Value{source.Text("abcd"), source.Text(v), source.Text("p" + v)}
	}
	evs := []source.Event{
		{Op: source.OpInsert, New: img("1")},
		{Op: source.OpUpdate, New: img("2"), Old: img("1")},
		{Op: source.OpDelete, Old: img("2")},
	}
	for _, p := range []Protocol{ProtocolCanalJSON, ProtocolCSV} {
		var buf bytes.Buffer
		for i := range evs {
			e := evs[i]
			e.Kind, e.Table, e.Def, e.CommitTs, e.Key = source.KindDML, "t0001", def, model.Ts(100+i), "abcd"
			if err := EncodeRow(&buf, p, "gen", &e); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := DecodeRows(p, buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		want := []Row{
			{Table: "t0001", Op: "INSERT", Key: "abcd", Version: 1, CommitTs: 100, Value: "p1"},
			{Table: "t0001", Op: "UPDATE", Key: "abcd", Version: 2, CommitTs: 101, Value: "p2"},
			{Table: "t0001", Op: "DELETE", Key: "abcd", Version: 3, CommitTs: 102, Value: "p2"},
		}
		if jsonOf(rows) != jsonOf(want) {
			t.Fatalf("%s: got %s", p, jsonOf(rows))
		}
	}
}

// What the CSV protocol writes reads back as the same values, whatever
// the text (commas, quotes, newlines, NUL), except the two words it
// reserves: \N (NULL, as TiCDC writes it) and CSVUnchanged.
func FuzzCSVRoundTrip(f *testing.F) {
	f.Add("a,b", "\"q\"\nline", false)
	f.Add("", " lead", true)
	f.Add("\r\n", "x\x00y", false)
	f.Fuzz(func(t *testing.T, a, b string, null bool) {
		if a == csvNull || a == CSVUnchanged || b == csvNull || b == CSVUnchanged {
			t.Skip("reserved")
		}
		def := &source.TableDef{Schema: "s", Name: "t", Columns: []source.ColumnDef{
			{Name: "k", Type: "text", KeyPos: 1}, {Name: "a", Type: "text"}, {Name: "b", Type: "text"}, {Name: "c", Type: "text"},
		}}
		last := source.Value{Unchanged: true}
		if null {
			last = source.Null
		}
		e := source.Event{Kind: source.KindDML, Op: source.OpUpdate, Table: "s.t", Def: def, CommitTs: 9,
			New: []source.Value{source.Text(a), source.Text(a), source.Text(b), last}}
		var buf bytes.Buffer
		if err := EncodeRow(&buf, ProtocolCSV, "", &e); err != nil {
			t.Fatal(err)
		}
		chs, err := DecodeCSVChanges(buf.Bytes(), CSVColumns{Names: []string{"k", "a", "b", "c"}, PkNames: []string{"k"}})
		if err != nil {
			t.Fatalf("%q: %v", buf.String(), err)
		}
		if len(chs) != 1 {
			t.Fatalf("%q: %d changes", buf.String(), len(chs))
		}
		c := chs[0]
		// encoding/csv reads \r\n inside a quoted field as \n.
		norm := func(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }
		c4, has := c.Data["c"]
		switch {
		case c.Op != "UPDATE" || c.CommitTs != 9 || c.Database != "s" || c.Table != "t" || !c.NoOld:
			t.Fatalf("%q: %+v", buf.String(), c)
		case c.Data["a"] == nil || *c.Data["a"] != norm(a) || c.Key() != norm(a):
			t.Fatalf("%q: a = %v, want %q", buf.String(), c.Data["a"], a)
		case c.Data["b"] == nil || *c.Data["b"] != norm(b):
			t.Fatalf("%q: b = %v, want %q", buf.String(), c.Data["b"], b)
		case null && (!has || c4 != nil), !null && has:
			t.Fatalf("%q: c = %v (present %v), want null %v or left out", buf.String(), c4, has, null)
		}
	})
}

func FuzzDecodeCSVChanges(f *testing.F) {
	f.Add([]byte("U,t,s,9,1,\\N,"+CSVUnchanged+"\n"), 3)
	f.Add([]byte("I,t,s,x\n"), 0)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		cols := CSVColumns{}
		for i := 0; i < n%8; i++ {
			cols.Names = append(cols.Names, strconv.Itoa(i))
		}
		_, _ = DecodeCSVChanges(data, cols) // must not panic
	})
}

// A transaction's BEGIN and END records are JSON lines in Debezium's
// layout; a table name that needs escapes stays valid JSON.
func TestTransactionRecordsInDebeziumsLayout(t *testing.T) {
	e := &source.Event{Kind: source.KindTxn, CommitTs: 470806611073822272, Txn: &source.TxnSummary{SourceID: "0-1-77", Events: 3,
		Tables: []source.TableCount{{Table: "shop.orders", Events: 2}, {Table: `shop."Odd" name`, Events: 1}}}}
	lines := strings.Split(strings.TrimSuffix(string(AppendTxnRecords(nil, e)), "\n"), "\n")
	want := []string{
		`{"status":"BEGIN","id":"470806611073822272","ts_ms":1795984691901,"event_count":null,"data_collections":null,"commitTs":470806611073822272,"source_id":"0-1-77"}`,
		`{"status":"END","id":"470806611073822272","ts_ms":1795984691901,"event_count":3,"data_collections":[{"data_collection":"shop.orders","event_count":2},{"data_collection":"shop.\"Odd\" name","event_count":1}],"commitTs":470806611073822272,"source_id":"0-1-77"}`,
	}
	if !reflect.DeepEqual(lines, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	var end TxnRecord
	if err := json.Unmarshal([]byte(lines[1]), &end); err != nil || *end.EventCount != 3 || end.DataCollections[1].DataCollection != `shop."Odd" name` || end.SourceID != "0-1-77" {
		t.Fatalf("%+v %v", end, err)
	}
	if string(TxnKey(e.CommitTs)) != `{"id":"470806611073822272"}` {
		t.Fatalf("key %s", TxnKey(e.CommitTs))
	}
}
