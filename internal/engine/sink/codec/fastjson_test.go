package codec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// encodedLines are canal-json lines as this codec writes them: inserts,
// an update with its old values, a delete, NULLs, a composite key,
// escapes and non-ASCII text.
func encodedLines(t testing.TB) [][]byte {
	var out [][]byte
	for i, e := range []*source.Event{
		{Kind: source.KindDML, Op: source.OpInsert, Table: "shop.orders", Def: orders, CommitTs: 42, TxnOrder: 3, TxnTableOrder: 2,
			New: []source.Value{source.Text("eu"), source.Text("7"), source.Text("12.50"), source.Text("true"), source.Null}},
		{Kind: source.KindDML, Op: source.OpUpdate, Table: "shop.orders", Def: orders, CommitTs: model.Ts(1) << 62,
			Old: []source.Value{source.Text("eu"), source.Text("7"), source.Text("1"), source.Text("false"), source.Null},
			New: []source.Value{source.Text("eu"), source.Text("7"), source.Text("café \"quoted\" \\ \n tab\t"), source.Text("true"), source.Text("{a,b}")}},
		{Kind: source.KindDML, Op: source.OpDelete, Table: "shop.orders", Def: orders, CommitTs: 44,
			Old: []source.Value{source.Text("us"), source.Text("8"), source.Null, source.Text("true"), source.Null}},
	} {
		var buf bytes.Buffer
		if err := EncodeRow(&buf, ProtocolCanalJSON, "sinkdb", e); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		out = append(out, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	return out
}

// The lines this codec writes read as encoding/json reads them, and
// those without escapes by the fast path.
func TestCanalLinesReadAsEncodingJSONReadsThem(t *testing.T) {
	fast := 0
	for i, line := range encodedLines(t) {
		var got, want canalChange
		if err := decodeCanalChange(line, &got); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("line %d:\n got %+v\nwant %+v", i, got, want)
		}
		var m canalChange
		if fastCanalChange(line, &m) {
			fast++
		}
	}
	if fast != 2 {
		t.Fatalf("%d of 3 lines read by the fast path, want 2 (the one with escapes goes to encoding/json)", fast)
	}
}

// FuzzFastCanalChange: whatever the fast path reads, encoding/json reads
// the same, without an error.
func FuzzFastCanalChange(f *testing.F) {
	for _, line := range encodedLines(f) {
		f.Add(line)
	}
	for _, s := range []string{`{}`, `{"data":[{"a":"1"}],"data":[{"b":"2"}]}`, `{"DATA":[{"a":"1"}]}`, `{"_tidb":{"commitTs":01}}`,
		`{"x":[1,{"y":null}],"type":"INSERT"}`, `{"pkNames":null,"isDdl":false,"old":null}`, `{"table":"t"} x`, `{"_tidb":{"CommitTs":5}}`,
		`{"sqlType":{"a":-2,"b":2004,"a":4}}`, `{"sqlType":{"a":- 2}}`, `{"sqlType":{"a":-0}}`, `{"sqlType":null}`, `{"sqlType":{}}`, `{"sqlType":{"a":1},"sqlType":{"b":2}}`,
		`{"SQLTYPE":{"a":1}}`, `{"sqlType":{"a":9223372036854775807}}`, `{"sqlType":{"a":-9223372036854775808}}`, `{"sqlType":{"a":1.0}}`,
		`{"mysqlType":{"a":"bit(8)","b":"int"}}`, `{"mysqlType":{"a":"bit(8)","a":"int"}}`, `{"mysqlType":null}`, `{"mysqlType":{"a":"bit(8)"},"mysqlType":{}}`,
		`{"MYSQLTYPE":{"a":"bit(1)"}}`, `{"mysqlType":{"a":"bit(\u0038)"}}`, `{"mysqlType":{"a":"bit(65)","b":"bit","c":"bit(0)"}}`, `{"mysqlType":{"a":1}}`, `{"sqlType":{"a":-2,"a":4}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var fast canalChange
		if !fastCanalChange(line, &fast) {
			return
		}
		var want canalChange
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatalf("the fast path read %q, encoding/json refuses it: %v", line, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("%q:\n fast %+v\n json %+v", line, fast, want)
		}
	})
}
