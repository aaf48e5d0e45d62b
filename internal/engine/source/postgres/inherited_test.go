package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A plain table with an inheritance child (as TimescaleDB's hypertables
// have their chunks): a plain SELECT reads the child's rows with the
// table's, but PostgreSQL streams their changes under the child's name.
// The snapshot copies the table's own rows only, so that what the sink
// has of it is what its stream keeps up to date; verify reads the same;
// changefeed get says the child's rows are not the table's and how to
// replicate them. Before, the child's rows were copied as the table's and
// never changed downstream again.
func TestATablesInheritanceChildrenAreNotCopiedAsItsRows(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE parent (id int4 PRIMARY KEY, v text);
		CREATE TABLE child (x int4) INHERITS (parent);
		INSERT INTO parent VALUES (1, 'own'), (2, 'own');
		INSERT INTO child VALUES (3, 'child', 7), (4, 'child', 8)`)
	rig := startCopyRig(t, dsn+"&tables=parent", "inherited")
	p := rig.run(model.Span{Table: "public.parent", Key: "int4"}, rig.start, model.CopyProgress{})
	p.waitDone(t)
	var keys []string
	for _, e := range p.stopped(t) {
		if e.Kind == source.KindDML {
			keys = append(keys, textKey(&e))
		}
	}
	rig.stop(t)
	if strings.Join(keys, ",") != "1,2" {
		t.Fatalf("the snapshot copied keys %v; want the table's own, 1 and 2", keys)
	}
	r, err := NewTableReader(dsn + "&tables=parent")
	if err != nil {
		t.Fatal(err)
	}
	_, rows, err := r.Snapshot(context.Background(), []string{"public.parent"})
	if err != nil || len(rows["public.parent"]) != 2 {
		t.Fatalf("verify reads %d rows of public.parent (%v); want its own 2", len(rows["public.parent"]), err)
	}
	// Its publication has the table alone, not its child.
	out, err := srv.Psql(context.Background(), dbOf(dsn), `SELECT string_agg(tablename, ',') FROM pg_publication_tables WHERE pubname = '`+rig.src.cfg.Publication+`'`)
	if err != nil || strings.TrimSpace(out) != "parent" {
		t.Fatalf("the changefeed's publication has %q (%v); want parent alone", strings.TrimSpace(out), err)
	}
	st, err := Inspect(context.Background(), rig.src.cfg.URI(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(st.Warnings, "\n"); !strings.Contains(w, "table public.parent has inheritance children (public.child;") || !strings.Contains(w, "--add-table") {
		t.Fatalf("changefeed get warns %q", st.Warnings)
	}
}
