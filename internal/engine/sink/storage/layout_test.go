package storage

import (
	"encoding/json"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/row"
)

// A table version's schema file names each column's type as TiCDC's
// does: a MySQL column's own base type with its flags, its length or
// precision apart; an ENUM's members are not a precision.
func TestASchemaFileNamesMySQLTypesAsTheServerDoes(t *testing.T) {
	def := &row.TableDef{Schema: "shop", Name: "items", Dialect: row.DialectMySQL, Columns: []row.ColumnDef{
		{Name: "id", Type: "int(10) unsigned", KeyPos: 1}, {Name: "price", Type: "decimal(10,2)"},
		{Name: "state", Type: "enum('a','b)c')"}, {Name: "at", Type: "datetime(6)"}, {Name: "body", Type: "longtext"},
	}}
	_, b := schemaFile("shop", "items", 1, def, "")
	var f struct {
		TableColumns []tableColumn
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"INT UNSIGNED", "10"}, {"DECIMAL", "10,2"}, {"ENUM", ""}, {"DATETIME", "6"}, {"LONGTEXT", ""}}
	for i, c := range f.TableColumns {
		if got := [2]string{c.ColumnType, c.ColumnPrecision}; got != want[i] {
			t.Errorf("column %s: %q, want %q", c.ColumnName, got, want[i])
		}
	}
	if len(f.TableColumns) != len(want) {
		t.Fatalf("%d columns: %s", len(f.TableColumns), b)
	}
}
