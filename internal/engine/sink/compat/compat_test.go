package compat

import (
	"strings"
	"testing"
)

// The decoder accepts what the documents describe and refuses what they
// rule out, naming the field.
func TestDecodeCanalKeepsToTheDocuments(t *testing.T) {
	const good = `{"id":0,"database":"gen","table":"t1","pkNames":["id"],"isDdl":false,"type":"UPDATE","es":1,"ts":2,"sql":"","sqlType":{"id":4,"v":12},"mysqlType":{"id":"int","v":"varchar"},"data":[{"id":"7","v":"b"}],"old":[{"v":"a"}],"_tidb":{"commitTs":262144}}`
	r, err := DecodeCanal([]byte(good), Table{Database: "gen", Name: "t1", Columns: []string{"id", "v"}, Keys: []string{"id"}})
	if err != nil || r != (Row{Type: "UPDATE", Key: "7", CommitTs: 262144}) {
		t.Fatalf("a documented UPDATE: %+v, %v", r, err)
	}
	for bad, mention := range map[string]string{
		strings.Replace(good, `"es":1`, `"es":5`, 1):                            "es 5",
		strings.Replace(good, `"old":[{"v":"a"}]`, `"old":[{"v":"b"}]`, 1):      "did not change",
		strings.Replace(good, `"type":"UPDATE"`, `"type":"INSERT"`, 1):          "with old",
		strings.Replace(good, `,"mysqlType":{"id":"int","v":"varchar"}`, ``, 1): "mysqlType false",
		strings.Replace(good, `"_tidb":{"commitTs":262144}`, `"_tidb":{}`, 1):   "missing",
		`{"type":"TIDB_WATERMARK","_tidb":{}}`:                                  "watermarkTs",
	} {
		if _, err := DecodeCanal([]byte(bad), Table{}); err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("%s: %v; want an error mentioning %q", bad, err, mention)
		}
	}
	if r, err := DecodeCSV([]string{"D", "t1", "gen", "9", "x", "7"}, Table{Database: "gen", Name: "t1", Columns: []string{"v", "id"}, Keys: []string{"id"}}); err != nil || r != (Row{Type: "DELETE", Key: "7", CommitTs: 9}) {
		t.Fatalf("a documented CSV delete: %+v, %v", r, err)
	}
	if _, err := DecodeCSV([]string{"X", "t1", "gen", "9", "x", "7"}, Table{Database: "gen", Name: "t1", Columns: []string{"v", "id"}}); err == nil {
		t.Fatal("operation X was read")
	}
}
