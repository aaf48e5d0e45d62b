package postgres

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// A changefeed on a time-partitioned table's root replicates every child
// under the root's name: the rows there before it (the snapshot), rows
// written into any child under a workload, rows moving between children
// (an UPDATE of the partition key), and a child created while it runs.
// The rows rebuilt from what two partitions read equal the table's.
func TestAPartitionedRootReplicatesEveryChildEvenNewOnes(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int8, day date, v text, n int4, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE m_2025 PARTITION OF m FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
		INSERT INTO m SELECT g, date '2024-06-01' + (g % 500), md5(g::text), 0 FROM generate_series(1, 3000) g`)
	ctx := context.Background()
	rig := startCopyRig(t, dsn+"&tables=public.m", "parts")
	key := func(id string) string {
		k, err := model.EncodeKeyValues("int8,date", []string{id, "2024-01-01"})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	low := rig.run(model.Span{Table: "public.m", End: key("1500"), Key: "int8,date"}, rig.start, model.CopyProgress{})
	high := rig.run(model.Span{Table: "public.m", Start: key("1500"), Key: "int8,date"}, rig.start, model.CopyProgress{})

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(7))
	next := 10_000
	write := func(n int, days int) {
		t.Helper()
		for i := 0; i < n; i++ {
			id := 1 + rng.Intn(3000)
			var err error
			switch rng.Intn(5) {
			case 0:
				_, err = conn.Exec(ctx, `INSERT INTO m VALUES ($1, date '2024-01-01' + $2::int, 'new', 0)`, next, rng.Intn(days))
				next++
			case 1:
				_, err = conn.Exec(ctx, `DELETE FROM m WHERE id = $1`, id)
			case 2:
				// The partition key changes: the row moves to another child.
				_, err = conn.Exec(ctx, `UPDATE m SET day = date '2024-01-01' + $2::int WHERE id = $1`, id, rng.Intn(days))
			default:
				_, err = conn.Exec(ctx, `UPDATE m SET n = n + 1, v = 'upd' WHERE id = $1`, id)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	write(300, 730)
	select {
	case err := <-rig.done:
		t.Fatalf("the reader stopped: %v", err)
	case <-time.After(time.Second):
	}
	low.waitDone(t)
	high.waitDone(t)
	write(300, 730)
	// A new year's child while the changefeed runs, and rows into it.
	psql(t, srv, dsn, `CREATE TABLE m_2026 PARTITION OF m FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`)
	write(300, 1095)
	psql(t, srv, dsn, `INSERT INTO m VALUES (999999, '2026-12-31', 'last', 0)`)
	for deadline := time.Now().Add(60 * time.Second); !high.has("999999,2026-12-31"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last row (into the new child) did not arrive")
		}
	}
	var evs []source.Event
	for _, p := range []*partition{low, high} {
		evs = append(evs, p.stopped(t)...)
	}
	for _, e := range evs {
		if e.Kind == source.KindDDL {
			t.Errorf("a schema change of %s: %s (a child's creation is none)", e.Table, e.Statement)
		}
	}
	rig.stop(t)
	if n := rebuiltEqualsM(t, srv, dsn, evs); n < 2500 {
		t.Fatalf("only %d rows upstream", n)
	}
}

// rebuiltEqualsM rebuilds table m from the events partitions read and
// fails the test unless it equals m upstream; it returns how many rows
// m has.
func rebuiltEqualsM(t *testing.T, srv *pgserver.Server, dsn string, evs []source.Event) int {
	t.Helper()
	rows := map[string]string{}
	for _, e := range evs {
		if e.Kind != source.KindDML {
			continue
		}
		if e.Table != "public.m" {
			t.Fatalf("a row of %s: children's rows come as the root's", e.Table)
		}
		if e.Op == source.OpDelete {
			delete(rows, textKey(&e))
		} else {
			rows[textKey(&e)] = image(e.New)
		}
	}
	out, err := srv.Psql(context.Background(), dbOf(dsn), `SELECT id || ',' || day, id || '|' || day || '|' || v || '|' || n FROM m`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, line := range splitLines(out) {
		k, v, _ := strings.Cut(line, "|")
		want[k] = v
	}
	var diffs []string
	for k, v := range want {
		if rows[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: upstream %q, replicated %q", k, v, rows[k]))
		}
	}
	for k, v := range rows {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: not upstream, replicated %q", k, v))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("%d of %d rows differ; first: %s", len(diffs), len(want), strings.Join(diffs[:min(5, len(diffs))], "; "))
	}
	return len(want)
}

// image is a row's values joined as the test's query joins them.
func image(vs []source.Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.Text
	}
	return strings.Join(parts, "|")
}

// A column added with a DEFAULT to a partitioned table (replicated by its
// root): the value its older rows have in it is kept in each partition,
// not in the root, which holds no rows. Asked of the root alone, every
// such ADD COLUMN held the table, with a reason naming a rewrite that
// never happened.
func TestAColumnAddedWithADefaultToAPartitionedTableGoesOn(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int8, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE m_2025 PARTITION OF m FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
		INSERT INTO m VALUES (1, '2024-03-01'), (2, '2025-03-01')`)
	st, _, _ := open(t, dsn+"&tables=public.m")
	psql(t, srv, dsn, `ALTER TABLE m ADD COLUMN region text NOT NULL DEFAULT 'eu'`)
	psql(t, srv, dsn, `INSERT INTO m VALUES (3, '2024-04-01', 'us')`)
	tx := txns(t, st, 1)
	if holds := st.TakeHolds(); len(holds) != 0 {
		t.Fatalf("held: %+v", holds)
	}
	evs := tx[0].Events
	if len(evs) != 2 || evs[0].Kind != source.KindDDL || !strings.Contains(evs[0].Statement, `ADD COLUMN "region" text`) || !strings.Contains(evs[0].Statement, `DEFAULT 'eu'`) {
		t.Fatalf("the transaction after the ADD COLUMN: %+v", evs)
	}
}
