package eventlog

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A transaction of schema changes alone, different tables' sharing
// positions (a table's changes take the positions of its own before
// them), resolves the log to its highest, not its last: a table added
// back and dropped with another at once is [its reset at 50, its DROP at
// 51, the other's DROP at 50]. Resolved to its last (50), the DROP at 51
// was hidden from the table's partitions until the next commit.
func TestSchemaChangesSharingPositionsResolveToTheHighest(t *testing.T) {
	l, err := Open(t.TempDir(), 5, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ddl := func(table string, ts model.Ts, stmt string) source.Event {
		return source.Event{Kind: source.KindDDL, Table: table, CommitTs: ts, Def: v1, SchemaVersion: 1, TableVersion: ts, Statement: stmt}
	}
	if err := l.Append([]source.Event{ddl("public.t", 50, "TRUNCATE"), ddl("public.t", 51, "DROP"), ddl("public.u", 50, "DROP")}); err != nil {
		t.Fatal(err)
	}
	if r := l.Resolved(); r != 51 {
		t.Fatalf("resolved to %v, want 51", r)
	}
	if d := l.DDLs("public.t", 40, 100); len(d) != 2 || d[1].Statement != "DROP" {
		t.Fatalf("public.t's schema changes: %+v", d)
	}
	if d := l.DDLs("public.u", 40, 100); len(d) != 1 {
		t.Fatalf("public.u's schema changes: %+v", d)
	}
}
