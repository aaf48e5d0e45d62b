package postgres

import (
	"context"
	"crypto/md5"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/jackc/pgx/v5"
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

// An update between a chunk's watermarks drops the chunk's row (the
// stream carries the newer one), but an update that leaves a TOASTed
// value alone does not carry it: the sink would never be given the body
// of a row updated while its chunk was read. So the chunk adds, at its
// high watermark, an update of such a row giving the columns every
// change since its read left out. A workload updates only the small
// column of the rows the next chunk will read, 100 at a time, while the
// table is copied in 100-row chunks, and now and then rewrites a body
// (a change that gives the column, which the chunk must not undo): the
// rows rebuilt from what the partition read, a left-out value keeping
// the row's prior one, equal the table, bodies included.
func TestAChunkGivesTheToastedValuesAnUpdateInItsWindowLeftOut(t *testing.T) {
	// An idle machine copies the table (20 chunks) within 20 to 35 such
	// updates.
	const maxWindowUpdates = 60
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE docs (id int8 PRIMARY KEY, n int4, body text);
		ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
		INSERT INTO docs SELECT g, 0, (SELECT string_agg(md5(g::text || h::text), '') FROM generate_series(1, 100) h) FROM generate_series(1, 2000) g`)
	ctx := context.Background()
	rig := startCopyRig(t, dsn+"&tables=docs&chunk-rows=100", "toast_window")
	p := rig.run(model.Span{Table: "public.docs", Key: "int8"}, rig.start, model.CopyProgress{})
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(7))
	updates := 0
	for {
		p.mu.Lock()
		copied := p.copied
		p.mu.Unlock()
		if copied.Done {
			break
		}
		if updates >= maxWindowUpdates {
			// Enough updates in windows; the rest of the table copies
			// without them. Under load (CI: three packages' race-enabled
			// tests on two cores) updates every 5 ms outran the stream
			// the watermarks go through, and the copy took minutes.
			time.Sleep(20 * time.Millisecond)
			continue
		}
		from := int64(0)
		if after, ok := copied.After(); ok {
			vals, err := model.DecodeKeyValues("int8", after)
			if err != nil {
				t.Fatal(err)
			}
			from, _ = strconv.ParseInt(vals[0], 10, 64)
		}
		if _, err := conn.Exec(ctx, `UPDATE docs SET n = n + 1 WHERE id > $1 AND id <= $1 + 100`, from); err != nil {
			t.Fatal(err)
		}
		if updates++; updates%10 == 0 {
			if _, err := conn.Exec(ctx, `UPDATE docs SET body = md5(random()::text) || body WHERE id = $1`, from+1+int64(rng.Intn(100))); err != nil {
				t.Fatal(err)
			}
		}
		// Not flat out: the stream the watermarks go through keeps up.
		time.Sleep(5 * time.Millisecond)
	}
	psql(t, srv, dsn, `INSERT INTO docs VALUES (999999, 0, 'last')`)
	// Generous: CI runs three packages' race-enabled tests on two cores.
	for deadline := time.Now().Add(90 * time.Second); !p.has("999999"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last change did not arrive")
		}
	}
	evs := p.stopped(t)
	rig.stop(t)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].CommitTs < evs[j].CommitTs })
	rows := map[string][]source.Value{}
	for _, e := range evs {
		if e.Kind != source.KindDML {
			continue
		}
		k := textKey(&e)
		if e.Op == source.OpDelete {
			delete(rows, k)
			continue
		}
		row := append([]source.Value(nil), e.New...)
		for i, v := range row {
			if v.Unchanged && rows[k] != nil {
				row[i] = rows[k][i] // left out: the row keeps its value
			}
		}
		rows[k] = row
	}
	out, err := srv.Psql(ctx, dbOf(dsn), `SELECT id || ' ' || n || ' ' || md5(body) FROM docs`)
	if err != nil {
		t.Fatal(err)
	}
	want := splitLines(out)
	wrong := 0
	for _, line := range want {
		var id, n, sum string
		fmt.Sscan(line, &id, &n, &sum)
		row := rows[id]
		got := "missing"
		if row != nil {
			got = row[1].Text + " " + fmt.Sprintf("%x", md5.Sum([]byte(row[2].Text)))
			if row[2].Unchanged {
				got = row[1].Text + " never given"
			}
		}
		if got != n+" "+sum {
			if wrong++; wrong <= 3 {
				t.Logf("row %s: upstream n %s body %s; rebuilt %s", id, n, sum, got)
			}
		}
	}
	if wrong > 0 || len(rows) != len(want) {
		t.Fatalf("%d of %d rows differ (%d rebuilt) after %d updates while the table was copied", wrong, len(want), len(rows), updates)
	}
	t.Logf("%d rows equal, bodies included, after %d updates of the next chunk's rows while they were copied", len(want), updates)
}

// A key stored out of line (a long text key, STORAGE EXTERNAL) is not in
// the new row of an UPDATE that leaves it alone; under the default
// identity the old key tuple carries it. The update is keyed by it: the
// row had no key, and its table was held for good.
func TestAnUnchangedToastedKeyIsTakenFromTheOldKey(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE lk (k text PRIMARY KEY, n int4); ALTER TABLE lk ALTER COLUMN k SET STORAGE EXTERNAL`)
	st, _, _ := open(t, dsn+"&tables=public.lk")
	psql(t, srv, dsn, `INSERT INTO lk SELECT string_agg(md5(g::text), ''), 0 FROM generate_series(1, 70) g`)
	psql(t, srv, dsn, `UPDATE lk SET n = 1`)
	tx := txns(t, st, 2)
	if len(tx[0].Events) != 1 || len(tx[1].Events) != 1 {
		t.Fatalf("an insert and an update of a row whose key is stored out of line came as %d and %d rows (the table held?)", len(tx[0].Events), len(tx[1].Events))
	}
	ins, upd := tx[0].Events[0], tx[1].Events[0]
	if upd.Op != source.OpUpdate || upd.Key != ins.Key || len(ins.New[0].Text) < 2000 || upd.New[0].Text != ins.New[0].Text || upd.New[1].Text != "1" {
		t.Fatalf("the update of a row whose key is stored out of line: %s key %.20q… new %.20q…; want an update of the inserted key %.20q…", upd.Op, upd.Key, upd.New[0].Text, ins.Key)
	}
}
