package postgres

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The initial snapshot under writes, copied by partitions: 10,000 rows
// exist, the table is cut into three partitions that copy their own
// ranges (about five chunks each), a workload updates, deletes and
// inserts rows of every chunk meanwhile, one partition is moved (stopped
// and started again from where it stood) and one is split while they
// copy. The rows the partitions delivered, applied in order, equal the
// table afterwards; no row was copied twice; every partition's copy ends
// done.
func TestPartitionsCopyTheirRangesConsistentWithTheStream(t *testing.T) {
	t.Parallel()
	snapshotUnderWrites(t, false)
}

// A column added while the partitions copy: chunks whose window the
// change falls in are read again under the new schema. The rows still
// equal the table, and the last carry the new column.
func TestASchemaChangeDuringTheSnapshot(t *testing.T) {
	t.Parallel()
	snapshotUnderWrites(t, true)
}

func snapshotUnderWrites(t *testing.T, ddl bool) {
	srv, dsn := newDB(t, `CREATE TABLE t (id int8 PRIMARY KEY, v text, n int4);
		INSERT INTO t SELECT g, md5(g::text), 0 FROM generate_series(1, 10000) g`)
	ctx := context.Background()
	cf := model.ChangefeedID("snap")
	if ddl {
		cf = "snap_ddl" // the tests run at once: a slot name of its own
	}
	rig := startCopyRig(t, dsn+"&tables=t&chunk-rows=700", cf)
	key := func(id string) string {
		k, err := model.EncodeKeyValues("int8", []string{id})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	start := rig.start
	// a and b pause mid-copy (after two chunks) until they are moved and
	// split; c copies on.
	a := rig.runHeld(model.Span{Table: "public.t", End: key("3000"), Key: "int8"}, start, model.CopyProgress{}, 1000)
	b := rig.runHeld(model.Span{Table: "public.t", Start: key("3000"), End: key("7000"), Key: "int8"}, start, model.CopyProgress{}, 1000)
	c := rig.run(model.Span{Table: "public.t", Start: key("7000"), Key: "int8"}, start, model.CopyProgress{})

	// The workload, while the partitions copy.
	next := 20001
	stop := writeUntil(t, dsn, 3, func(conn *pgx.Conn, rng *rand.Rand) error {
		id := 1 + rng.Intn(10000)
		var err error
		// 2,000 new rows at the end of c's range and about as many
		// deletes, then updates only: c's copy reads up to what is
		// there, two chunks between its watermarks' trips through the
		// stream, and under the race detector the stream after the ALTER
		// TABLE fell behind an endless run of inserts (its lag growing a
		// quarter of a second a second), so that c chased them for ever;
		// and a longer run deleted most of the table.
		switch op, more := rng.Intn(4), next < 22001; {
		case op == 0 && more:
			_, err = conn.Exec(ctx, `DELETE FROM t WHERE id = $1`, id)
		case op == 1 && more:
			_, err = conn.Exec(ctx, `INSERT INTO t VALUES ($1, 'new', 1)`, next)
			next++
		default:
			_, err = conn.Exec(ctx, `UPDATE t SET n = n + 1, v = 'upd' WHERE id = $1`, id)
		}
		return err
	})

	// A move of a while copying: stopped where it stands, started again
	// from there. A split of b while copying: its progress cut at 5000.
	parts := []*partition{c}
	moved := rig.whenCopying(a)
	movedAt, copied := moved.stopAt(t)
	parts = append(parts, moved, rig.run(moved.span, movedAt, copied))
	if ddl {
		psql(t, srv, dsn, `ALTER TABLE t ADD COLUMN w int4 DEFAULT 5`)
	}
	split := rig.whenCopying(b)
	at, copied := split.stopAt(t)
	lowCopy, upCopy := copied.Cut(key("5000"))
	low, up := split.span, split.span
	low.End, up.Start = key("5000"), key("5000")
	parts = append(parts, split, rig.run(low, at, lowCopy), rig.run(up, at, upCopy))
	t.Logf("moved at %v after copying %d rows; split at %v after copying %d rows (%+v, %+v)", movedAt, moved.copiedRows(), at, split.copiedRows(), lowCopy, upCopy)

	for _, p := range parts {
		p.waitDone(t)
	}
	stop()
	// A last change, to know when the stream has delivered everything.
	psql(t, srv, dsn, `INSERT INTO t VALUES (999999, 'last', 0)`)
	last := c // the partition of key 999999
	for deadline := time.Now().Add(30 * time.Second); !last.has("999999"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last change did not arrive")
		}
	}
	var evs []source.Event
	var from []int // which partition read each event, for a failure's story
	for i, p := range parts {
		read := p.stopped(t)
		evs = append(evs, read...)
		for range read {
			from = append(from, i)
		}
	}
	rig.stop(t)
	order := make([]int, len(evs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return evs[order[i]].CommitTs < evs[order[j]].CommitTs })
	sorted := make([]source.Event, len(evs))
	parted := make([]int, len(evs))
	for i, j := range order {
		sorted[i], parted[i] = evs[j], from[j]
	}
	evs = sorted

	rows := map[string]string{}
	copies := map[string]int{}
	for _, e := range evs {
		if e.Kind != source.KindDML {
			continue
		}
		switch k := textKey(&e); e.Op {
		case source.OpDelete:
			delete(rows, k)
		default:
			if id, _ := strconv.Atoi(k); e.Op == source.OpInsert && id <= 10000 {
				// Only the copy inserts the keys that existed before
				// (the workload inserts new ones, which a chunk read
				// after them copies again, as DBLog does): once each.
				copies[k]++
			}
			rows[k] = e.New[1].Text + "/" + e.New[2].Text
		}
	}
	want := map[string]string{}
	out, err := srv.Psql(ctx, dbOf(dsn), `SELECT id || ' ' || v || '/' || n FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range splitLines(out) {
		var id, rest string
		fmt.Sscan(line, &id, &rest)
		want[id] = rest
	}
	if len(want) < 5000 {
		t.Fatalf("only %d rows upstream", len(want))
	}
	missing, extra, different, twice := 0, 0, 0, 0
	var wrong []string
	for k, v := range want {
		g, ok := rows[k]
		switch {
		case !ok:
			missing++
			wrong = append(wrong, k)
		case g != v:
			different++
			wrong = append(wrong, k)
		}
	}
	for k := range rows {
		if _, ok := want[k]; !ok {
			extra++
			wrong = append(wrong, k)
		}
	}
	// A wrong row's story: every event of its key, with the partition
	// that read it (0 is c; 1, 2 the moved partition before and after;
	// 3, 4, 5 the split one and its halves).
	sort.Strings(wrong)
	for _, k := range wrong[:min(len(wrong), 3)] {
		t.Logf("row %s: upstream %q", k, want[k])
		for i := range evs {
			e := &evs[i]
			if e.Kind == source.KindDDL {
				t.Logf("  partition %d: DDL at %v", parted[i], e.CommitTs)
			} else if textKey(e) == k {
				t.Logf("  partition %d: %v at %v: %v", parted[i], e.Op, e.CommitTs, e.New)
			}
		}
	}
	for _, n := range copies {
		if n > 1 {
			twice++
		}
	}
	if missing+extra+different+twice > 0 {
		t.Logf("%d transactions a chunk's read missed before its low watermark", rig.src.missed.Load())
		t.Fatalf("rebuilt from the partitions: %d missing, %d extra, %d different of %d rows; %d inserted twice", missing, extra, different, len(want), twice)
	}
	if ddl {
		// Rows copied or written after the change carry the new column.
		e := evs[len(evs)-1]
		if len(e.New) != 4 || e.New[3].Text != "0" && e.New[3].Text != "5" {
			t.Fatalf("the last row %+v does not carry the added column", e.New)
		}
	}
	var total int64
	for _, p := range parts[len(parts)-4:] {
		total += p.copiedRows()
	}
	t.Logf("%d rows equal after a snapshot by partitions under writes; the last four partitions' progress counts %d rows; %d transactions a chunk's read missed", len(want), total, rig.src.missed.Load())
}

// A table without a primary key is copied under a SHARE lock, in chunks
// from one cursor, by its one partition, while a workload writes to it
// (its writes wait for the copy): the rows delivered, applied in order
// as a multiset, equal the table afterwards, equal rows counted.
func TestAKeylessTableIsCopiedFromOneSnapshot(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE k (kind text, n int4);
		ALTER TABLE k REPLICA IDENTITY FULL;
		INSERT INTO k SELECT 'k' || (g % 50), 0 FROM generate_series(1, 3000) g`)
	ctx := context.Background()
	// Five chunks under one lock.
	rig := startCopyRig(t, dsn+"&tables=k&chunk-rows=700", "keyless")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(5))
	// Changes before the partition starts are in the copy: the stream's
	// rows of them are dropped.
	write := func(n int) {
		for i := 0; i < n; i++ {
			kind := fmt.Sprintf("k%d", rng.Intn(50))
			var err error
			switch rng.Intn(3) {
			case 0:
				_, err = conn.Exec(ctx, `INSERT INTO k VALUES ($1, 0)`, kind)
			case 1:
				_, err = conn.Exec(ctx, `UPDATE k SET n = n + 1 WHERE ctid = (SELECT ctid FROM k WHERE kind = $1 LIMIT 1)`, kind)
			default:
				_, err = conn.Exec(ctx, `DELETE FROM k WHERE ctid = (SELECT ctid FROM k WHERE kind = $1 LIMIT 1)`, kind)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	write(100)
	p := rig.run(model.Span{Table: "public.k", Key: model.NoKey}, rig.start, model.CopyProgress{})
	write(300)
	p.waitDone(t)
	psql(t, srv, dsn, `INSERT INTO k VALUES ('last', -1)`)
	image := func(vs []source.Value) string { return vs[0].Text + "/" + vs[1].Text }
	arrived := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := len(p.evs)
		return n > 0 && p.evs[n-1].New != nil && image(p.evs[n-1].New) == "last/-1"
	}
	for deadline := time.Now().Add(60 * time.Second); !arrived(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last change did not arrive")
		}
	}
	evs := p.stopped(t)
	rig.stop(t)
	got := map[string]int{}
	for _, e := range evs {
		switch e.Op {
		case source.OpInsert:
			got[image(e.New)]++
		case source.OpUpdate:
			got[image(e.Old)]--
			got[image(e.New)]++
		case source.OpDelete:
			got[image(e.Old)]--
		}
	}
	want := map[string]int{}
	out, err := srv.Psql(ctx, dbOf(dsn), `SELECT kind || '/' || n FROM k`)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range splitLines(out) {
		want[line]++
	}
	if want["last/-1"] != 1 || got["last/-1"] != 1 {
		t.Fatalf("the last row: %d upstream, %d delivered", want["last/-1"], got["last/-1"])
	}
	for img, n := range want {
		if got[img] != n {
			t.Errorf("row %s: %d copies delivered, %d upstream", img, got[img], n)
		}
	}
	for img, n := range got {
		if _, ok := want[img]; !ok && n != 0 {
			t.Errorf("row %s: %d copies delivered, none upstream", img, n)
		}
	}
}

func dbOf(dsn string) string {
	if !strings.Contains(dsn, "tables=") {
		dsn += "&tables=x"
	}
	cfg, _ := ParseURI(dsn)
	c, _ := pgx.ParseConfig(cfg.ConnString)
	return c.Database
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func (l *memLog) has(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.evs {
		if textKey(&l.evs[i]) == key {
			return true
		}
	}
	return false
}

// A column added to a table nobody writes, while its partition copies:
// the catalog has the column, the stream (which describes a table's
// columns only with its next row) does not yet. The copy does not wait
// for a row: chunks read after the change leave the column out, and the
// schema change, when a row brings it, gives it to the rows before.
func TestACopyDoesNotWaitForAQuietTablesNewColumns(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE q (id int4 PRIMARY KEY, v text);
		INSERT INTO q SELECT g, 'x' FROM generate_series(1, 3000) g`)
	rig := startCopyRig(t, dsn+"&tables=q&chunk-rows=500", "quiet")
	p := rig.runHeld(model.Span{Table: "public.q", Key: "int4"}, rig.start, model.CopyProgress{}, 1000)
	rig.whenCopying(p)
	psql(t, srv, dsn, `ALTER TABLE q ADD COLUMN w int4 DEFAULT 5`)
	p.release()
	p.waitDone(t) // within seconds: no chunk is read again and again
	psql(t, srv, dsn, `INSERT INTO q VALUES (5000, 'y', 6)`)
	for deadline := time.Now().Add(30 * time.Second); !p.has("5000"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the row written after the change did not arrive")
		}
	}
	keys := map[string]int{}
	var ddl *source.Event
	for _, e := range p.stopped(t) {
		switch {
		case e.Kind == source.KindDDL:
			ddl = &e
		case len(e.New) != 2 && textKey(&e) != "5000":
			t.Fatalf("a row before the schema change has columns %v", e.New)
		}
		keys[textKey(&e)]++
	}
	if ddl == nil || !strings.Contains(ddl.Statement, `ADD COLUMN "w" int4 DEFAULT '5'`) {
		t.Fatalf("the schema change: %+v", ddl)
	}
	if len(keys) != 3001+1 { // the rows, the new one, and the DDL's empty key
		t.Fatalf("%d keys arrived", len(keys))
	}
	rig.stop(t)
}
