package postgres

import (
	"strings"
	"testing"
)

// Two-phase transactions arrive at their outcome, as MySQL's XA ones do
// (the slot decodes a prepared transaction at its COMMIT PREPARED, not at
// its PREPARE TRANSACTION: the reader asks for no two_phase): one
// prepared, then committed after another transaction committed, comes
// after that one; one rolled back never arrives.
func TestTwoPhaseTransactionsArriveAtTheirOutcome(t *testing.T) {
	t.Parallel()
	srv := startDB(t, "tp", "max_prepared_transactions=10")
	psql(t, srv, srv.DSN("tp"), `CREATE TABLE t (id int4 PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')`)
	st, _, _ := open(t, srv.DSN("tp")+"&tables=t")
	psql(t, srv, srv.DSN("tp"), `BEGIN; INSERT INTO t VALUES (2, 'two'); UPDATE t SET v = 'A' WHERE id = 1; PREPARE TRANSACTION 'x1'`)
	psql(t, srv, srv.DSN("tp"), `INSERT INTO t VALUES (3, 'three')`)
	psql(t, srv, srv.DSN("tp"), `COMMIT PREPARED 'x1'`)
	psql(t, srv, srv.DSN("tp"), `BEGIN; INSERT INTO t VALUES (4, 'four'); PREPARE TRANSACTION 'x2'`)
	psql(t, srv, srv.DSN("tp"), `ROLLBACK PREPARED 'x2'`)
	psql(t, srv, srv.DSN("tp"), `INSERT INTO t VALUES (5, 'five')`)
	tx := txns(t, st, 3)
	var seen []string
	for _, x := range tx {
		var evs []string
		for _, e := range x.Events {
			evs = append(evs, e.Op.String()+" "+textKey(&e))
		}
		seen = append(seen, strings.Join(evs, "; "))
	}
	if got := strings.Join(seen, " | "); got != "INSERT 3 | INSERT 2; UPDATE 1 | INSERT 5" {
		t.Fatalf("transactions: %s, want INSERT 3 | INSERT 2; UPDATE 1 | INSERT 5 (the rolled-back insert of 4 must not appear)", got)
	}
}
