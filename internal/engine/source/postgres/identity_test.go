package postgres

import (
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A table's replica identity set to an index of other columns than its
// primary key while the changefeed runs (its creation refuses one) holds
// the table, saying what to do. Before, the relation message's flags
// (the index's columns) were read as a new primary key: a schema change
// "primary key changed" went to the sink, and the table's rows were keyed
// by the index from there, against partitions cut on the primary key,
// its DELETEs carrying only the index's columns.
func TestAReplicaIdentityIndexSetWhileReplicatingHoldsTheTable(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, email text NOT NULL UNIQUE, v text); INSERT INTO t VALUES (1, 'a', 'x'), (2, 'b', 'y');
		CREATE TABLE pk (id int4 PRIMARY KEY, v text);
		CREATE TABLE k (id int4 PRIMARY KEY, a int4 NOT NULL, b int4 NOT NULL, c int4 NOT NULL UNIQUE); INSERT INTO k VALUES (1, 1, 1, 1)`)
	st, _, _ := open(t, dsn+"&tables=t,pk,k")
	psql(t, srv, dsn, `INSERT INTO t VALUES (3, 'c', 'z')`)
	txns(t, st, 1)
	// The primary key's own index as the identity is the default's.
	psql(t, srv, dsn, `ALTER TABLE pk REPLICA IDENTITY USING INDEX pk_pkey; INSERT INTO pk VALUES (1, 'a')`)
	psql(t, srv, dsn, `ALTER TABLE t REPLICA IDENTITY USING INDEX t_email_key; UPDATE t SET v = 'q' WHERE id = 1; DELETE FROM t WHERE id = 2`)
	// The key changed too, and the identity is an index of neither.
	psql(t, srv, dsn, `ALTER TABLE k REPLICA IDENTITY USING INDEX k_c_key; ALTER TABLE k DROP CONSTRAINT k_pkey; ALTER TABLE k ADD PRIMARY KEY (a, b); UPDATE k SET id = 2`)
	for _, tx := range txns(t, st, 3) {
		for _, e := range tx.Events {
			if e.Table == "public.t" || e.Table == "public.k" {
				t.Fatalf("an event of public.t after its identity changed: %+v", e)
			}
			if e.Kind == source.KindDDL {
				t.Fatalf("a schema change: %s", e.Statement)
			}
		}
	}
	holds := st.TakeHolds()
	if len(holds) != 2 || holds[0].Table != "public.t" || !strings.Contains(holds[0].Reason, "an index of (email), not its primary key (id)") ||
		!strings.Contains(holds[0].Reason, "REPLICA IDENTITY DEFAULT") || !strings.Contains(holds[0].Reason, "--copy-table public.t") ||
		holds[1].Table != "public.k" || !strings.Contains(holds[1].Reason, "an index of (c), not its primary key (a, b)") {
		t.Fatalf("holds: %+v", holds)
	}
}
