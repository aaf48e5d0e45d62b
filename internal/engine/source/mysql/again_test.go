package mysql

import "testing"

// MySQL converts a column to its new type without a USING: whether the
// rows' values change follows from the two types. Those that keep them
// copy nothing again; every other change copies the table again.
func TestTypeChangesThatKeepTheValuesAreKnown(t *testing.T) {
	for _, c := range []struct {
		from, to string
		keeps    bool
	}{
		{"int(11)", "bigint(20)", true},
		{"int", "bigint", true},
		{"int(11)", "int", true}, // a display width only
		{"bigint(20)", "int(11)", false},
		{"int(10) unsigned", "bigint(20)", true},
		{"int(10) unsigned", "int(11)", false},
		{"int(11)", "int(10) unsigned", false},
		{"int(11)", "int(11) unsigned zerofill", false},
		{"decimal(10,2)", "decimal(12,2)", true},
		{"decimal(10,2)", "decimal(10,1)", false},
		{"decimal(10,2)", "decimal(11,3)", false}, // 1.25 reads 1.250
		{"decimal(10,2)", "decimal(9,2)", false},
		{"varchar(20)", "varchar(80)", true},
		{"varchar(80)", "varchar(20)", false},
		{"varchar(20)", "text", true},
		{"varchar(20)", "char(20)", false}, // CHAR drops trailing spaces
		{"char(10)", "varchar(10)", true},
		{"text", "mediumtext", true},
		{"mediumtext", "text", false},
		{"text", "varchar(100)", false},
		{"varbinary(10)", "varbinary(20)", true},
		{"varchar(10)", "varbinary(10)", false},
		{"binary(4)", "binary(8)", false}, // padded with zero bytes
		{"blob", "longblob", true},
		{"enum('a','b')", "enum('a','b','c')", true},
		{"enum('a','b')", "enum('b','a')", false},
		{"set('x','y')", "set('x','y','z')", true},
		{"datetime", "datetime(3)", false},
		{"float", "double", false},
		{"date", "datetime", false},
	} {
		if got := keepsValues(c.from, c.to, "", ""); got != c.keeps {
			t.Errorf("%s to %s: keeps the values %v, want %v", c.from, c.to, got, c.keeps)
		}
	}
	if keepsValues("varchar(20)", "varchar(20)", "", "latin1") || keepsValues("varchar(20)", "varchar(20)", "latin1", "cp1251") {
		t.Error("a column given another character set than UTF-8 keeps its values")
	}
	if !keepsValues("varchar(20)", "varchar(20)", "latin1", "") {
		t.Error("a column converted to UTF-8 changes its values")
	}
}
