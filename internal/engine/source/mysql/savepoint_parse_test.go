package mysql

import (
	"strings"
	"testing"
)

// The savepoint statements as the server writes them into the binary
// log, and as a session may type them, give their verb and the name
// unquoted; nothing else is one.
func TestSavepointStatementsAreRead(t *testing.T) {
	for q, want := range map[string][2]string{
		"SAVEPOINT `s`":                    {"SAVEPOINT", "s"},
		"savepoint s1":                     {"SAVEPOINT", "s1"},
		"ROLLBACK TO `s`":                  {"ROLLBACK", "s"},
		"ROLLBACK TO SAVEPOINT `a b`":      {"ROLLBACK", "a b"},
		"rollback work to savepoint x":     {"ROLLBACK", "x"},
		"ROLLBACK TO `savepoint`":          {"ROLLBACK", "savepoint"},
		"ROLLBACK TO SAVEPOINT":            {"ROLLBACK", "SAVEPOINT"},
		"RELEASE SAVEPOINT `q``uote`":      {"RELEASE", "q`uote"},
		"ROLLBACK":                         {"", ""},
		"COMMIT":                           {"", ""},
		"SAVEPOINT":                        {"", ""},
		"RELEASE SAVEPOINT":                {"", ""},
		"INSERT INTO savepoint VALUES (1)": {"", ""},
		"XA ROLLBACK 'x'":                  {"", ""},
	} {
		if verb, name := savepointStatement(q); verb != want[0] || name != want[1] {
			t.Errorf("%q: %q %q, want %q %q", q, verb, name, want[0], want[1])
		}
	}
}

// Any name, quoted as the server quotes it, is read back as it was set,
// in each of the three statements.
func FuzzSavepointStatement(f *testing.F) {
	for _, s := range []string{"s", "a b", "q`uote", "SAVEPOINT", " x ", "ß"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" || strings.ContainsAny(name, "\x00") {
			return
		}
		quoted := "`" + strings.ReplaceAll(name, "`", "``") + "`"
		for _, q := range []string{"SAVEPOINT " + quoted, "ROLLBACK TO " + quoted, "ROLLBACK TO SAVEPOINT " + quoted, "RELEASE SAVEPOINT " + quoted} {
			if _, got := savepointStatement(q); got != name {
				t.Fatalf("%q read as %q, want %q", q, got, name)
			}
		}
	})
}
