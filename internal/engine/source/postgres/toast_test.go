package postgres

import (
	"testing"
)

// An UPDATE that leaves a TOASTed value alone does not send it. Under
// REPLICA IDENTITY FULL the old row has it, and the new row carries it;
// under the default identity the new row marks it unchanged (never an
// empty or NULL value), also when the key changed and the old tuple holds
// only the key.
func TestAnUnchangedToastedValueIsCarriedOrMarkedNeverMadeUp(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE docs (id int4 PRIMARY KEY, n int4, body text);
		CREATE TABLE fulls (id int4 PRIMARY KEY, n int4, body text);
		ALTER TABLE fulls REPLICA IDENTITY FULL`)
	st, _, _ := open(t, dsn+"&tables=public.docs,public.fulls")
	// About 6 KB of hex, stored out of line.
	big := `(SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 200) g)`
	psql(t, srv, dsn, `INSERT INTO docs VALUES (1, 0, `+big+`); INSERT INTO fulls VALUES (1, 0, `+big+`)`)
	psql(t, srv, dsn, `UPDATE docs SET n = 1 WHERE id = 1; UPDATE fulls SET n = 1 WHERE id = 1`)
	psql(t, srv, dsn, `UPDATE docs SET id = 2 WHERE id = 1`)
	// psql -c runs its statements as one transaction.
	tx := txns(t, st, 3)
	body := map[string]string{}
	for _, e := range tx[0].Events {
		body[e.Table] = e.New[2].Text
	}
	for _, e := range tx[1].Events {
		if e.Table != "public.fulls" {
			continue
		}
		if e.New[2].Unchanged {
			t.Fatalf("the REPLICA IDENTITY FULL update left the body out: %+v", e.New[2])
		}
		if len(body["public.fulls"]) < 6000 || e.New[2].Text != body["public.fulls"] {
			t.Fatalf("the REPLICA IDENTITY FULL update carries a body of %d bytes, the row has %d", len(e.New[2].Text), len(body["public.fulls"]))
		}
	}
	for _, x := range tx[1:] {
		for _, e := range x.Events {
			if e.Table != "public.docs" {
				continue
			}
			if e.New != nil && (!e.New[2].Unchanged || e.New[2].Null || e.New[2].Text != "") {
				t.Fatalf("a default-identity %s's body: %+v; want it marked unchanged", e.Op, e.New[2])
			}
		}
	}
}

// A delete under the default replica identity sends only the key:
// PostgreSQL fills the other columns with NULL, so they are marked
// unknown, never NULL. Under REPLICA IDENTITY FULL the delete carries
// the whole row.
func TestADeleteUnderTheDefaultIdentityCarriesOnlyItsKey(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE docs (id int4 PRIMARY KEY, n int4, body text);
		CREATE TABLE fulls (id int4 PRIMARY KEY, n int4, body text);
		ALTER TABLE fulls REPLICA IDENTITY FULL`)
	st, _, _ := open(t, dsn+"&tables=public.docs,public.fulls")
	psql(t, srv, dsn, `INSERT INTO docs VALUES (1, 5, 'x'); INSERT INTO fulls VALUES (1, 5, 'x')`)
	psql(t, srv, dsn, `DELETE FROM docs; DELETE FROM fulls`)
	tx := txns(t, st, 2)
	seen := 0
	for _, e := range tx[1].Events {
		seen++
		switch e.Table {
		case "public.docs":
			if e.Old[0].Text != "1" || !e.Old[1].Unchanged || !e.Old[2].Unchanged || e.Old[1].Null {
				t.Fatalf("a default-identity delete: %+v; want the key and the rest unknown", e.Old)
			}
		case "public.fulls":
			if e.Old[1].Text != "5" || e.Old[2].Text != "x" {
				t.Fatalf("a REPLICA IDENTITY FULL delete: %+v; want the whole row", e.Old)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("%d deletes", seen)
	}
}
