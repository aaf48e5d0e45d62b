package mysql

import "testing"

// A key column's type change holds its table only where it changes the
// text of the keys: not another integer width, a display width, a longer
// string or a wider DECIMAL of the same scale.
func TestOnlyAKeyTypeChangeThatChangesItsTextHoldsTheTable(t *testing.T) {
	for _, c := range []struct {
		from, to string
		same     bool
	}{
		{"int(11)", "bigint", true}, {"int", "int unsigned", true}, {"varchar(10)", "varchar(40)", true}, {"char(4)", "varchar(8)", true},
		{"varbinary(8)", "blob", true}, {"decimal(6,2)", "decimal(9,2)", true}, {"datetime", "datetime", true}, {"datetime(0)", "datetime", true},
		{"decimal(6,2)", "decimal(7,3)", false}, {"datetime", "datetime(3)", false}, {"binary(16)", "binary(20)", false}, {"float", "double", false},
		{"bit(8)", "bit(16)", false}, {"enum('a','b')", "enum('b','a')", false}, {"decimal(6,2) unsigned zerofill", "decimal(6,2) unsigned", true}, {"int", "varchar(10)", false},
		{"float", "float(7,2)", false}, {"double(10,3)", "double", false}, {"enum('a','b')", "enum('A','b')", false}, {"float", "float", true},
	} {
		if got := sameKeyText(c.from, c.to); got != c.same {
			t.Errorf("%s to %s keeps the keys' text: %v, want %v", c.from, c.to, got, c.same)
		}
	}
}
