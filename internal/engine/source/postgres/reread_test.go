package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A schema change keeps its position when the WAL is read again with
// the changefeed's tables changed since (a table removed at a checkpoint
// before it): a partition waits at its table's change one position below
// it and reads on only past it, so a change placed lower in the read
// again is never written. Here one transaction alters two tables, and
// the first is removed before the read again.
func TestASchemaChangeKeepsItsPositionWhenTheTablesChangedBeforeARead(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY); CREATE TABLE b (id int4 PRIMARY KEY)`)
	st, cfg, up := open(t, dsn+"&tables=a,b")
	psql(t, srv, dsn, `BEGIN; ALTER TABLE a ADD COLUMN c int4; ALTER TABLE b ADD COLUMN c int4; INSERT INTO a VALUES (1, 1); INSERT INTO b VALUES (1, 1); COMMIT`)
	positions := func(txs []*Txn) []string {
		var out []string
		for _, tx := range txs {
			for _, e := range tx.Events {
				if e.Table == "public.b" {
					out = append(out, fmt.Sprintf("%v %s", e.Kind == source.KindDDL, e.CommitTs))
				}
			}
		}
		return out
	}
	want := positions(txns(t, st, 1))
	_ = st.Close()
	tables := map[string]TableState{}
	for name, def := range up.Defs {
		if name != "public.a" {
			tables[name] = TableState{Def: def, Nums: up.Nums[name]}
		}
	}
	again, err := OpenStream(context.Background(), cfg, up.StartLSN, 0, tables, false, "")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	got := positions(txns(t, again, 1))
	if len(want) != 2 || !slices.Equal(got, want) {
		t.Fatalf("public.b's schema change and row: first read %q, read again without public.a %q", want, got)
	}
}
