package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
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
	again, err := reopen(func() (*Stream, error) {
		return OpenStream(context.Background(), cfg, up.StartLSN, 0, tables, false, "")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	got := positions(txns(t, again, 1))
	if len(want) != 2 || !slices.Equal(got, want) {
		t.Fatalf("public.b's schema change and row: first read %q, read again without public.a %q", want, got)
	}
}

// One transaction that changes the schemas of many replicated tables (a
// TRUNCATE of 70) writes each as a schema change at the transaction's
// first position: a table's changes take the positions of its own before
// them (slots.go). Before 2026-12-07 each took the next, and past 64 the
// rest were held. One table changed more times in a transaction than the
// transaction has positions is held, saying how to copy it again; the
// stream goes on. It used to stop the changefeed for good: a transaction
// already committed cannot be split, and the reader met it again at
// every restart.
func TestATransactionChangingMoreTablesThanItHasPositionsForHoldsTheRest(t *testing.T) {
	t.Parallel()
	var create, names, inserts, alters []string
	for i := 1; i <= ddlSlots+6; i++ {
		create = append(create, fmt.Sprintf("CREATE TABLE t%d (id int4 PRIMARY KEY); INSERT INTO t%d VALUES (1);", i, i))
		names = append(names, fmt.Sprintf("t%d", i))
		inserts = append(inserts, fmt.Sprintf("INSERT INTO t%d VALUES (2);", i))
		alters = append(alters, fmt.Sprintf("ALTER TABLE m ADD COLUMN c%d int4; INSERT INTO m (id) VALUES (%d);", i, i))
	}
	create = append(create, "CREATE TABLE m (id int4 PRIMARY KEY);")
	srv, dsn := newDB(t, strings.Join(create, "\n"))
	st, _, _ := open(t, dsn+"&tables="+strings.Join(names, ",")+",m")
	psql(t, srv, dsn, "TRUNCATE "+strings.Join(names, ", "))
	psql(t, srv, dsn, "BEGIN; "+strings.Join(inserts, " ")+" COMMIT")
	psql(t, srv, dsn, "BEGIN; "+strings.Join(alters, " ")+" COMMIT")
	tx := txns(t, st, 3)
	truncates := 0
	for _, e := range tx[0].Events {
		if source.IsTruncate(&e) {
			truncates++
			if e.CommitTs != tx[0].Ts-ddlSlots {
				t.Fatalf("the TRUNCATE of %s at %s, the transaction's rows at %s: not at its first position", e.Table, e.CommitTs, tx[0].Ts)
			}
		}
	}
	if truncates != ddlSlots+6 || len(tx[1].Events) != ddlSlots+6 {
		t.Fatalf("%d TRUNCATEs written and %d rows after, want %d of each", truncates, len(tx[1].Events), ddlSlots+6)
	}
	holds := st.TakeHolds()
	if len(holds) != 1 || holds[0].Table != "public.m" || !strings.Contains(holds[0].Reason, fmt.Sprintf("more than %d times", ddlSlots)) || !strings.Contains(holds[0].Reason, "--copy-table public.m") {
		t.Fatalf("holds: %+v", holds)
	}
	changes := 0
	for _, e := range tx[2].Events {
		if e.Kind == source.KindDDL {
			changes++
			if e.CommitTs != tx[2].Ts-ddlSlots+model.Ts(changes-1) {
				t.Fatalf("public.m's change %d at %s, the rows at %s", changes, e.CommitTs, tx[2].Ts)
			}
		}
	}
	if changes != ddlSlots {
		t.Fatalf("%d schema changes of public.m written, want the first %d", changes, ddlSlots)
	}
}
