package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// members are the relations a publication names itself, and whether it
// publishes partitions' rows under their root's name.
func members(t *testing.T, srv *pgserver.Server, dsn, pub string) string {
	t.Helper()
	out, err := srv.Psql(context.Background(), dbOf(dsn), `SELECT coalesce(string_agg(c.relname, ',' ORDER BY c.relname), '') || ' viaroot=' || pb.pubviaroot
FROM pg_publication pb LEFT JOIN pg_publication_rel pr ON pr.prpubid = pb.oid LEFT JOIN pg_class c ON c.oid = pr.prrelid
WHERE pb.pubname = '`+pub+`' GROUP BY pb.pubviaroot`)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// A change of the tables that cannot be stored is undone: the tables it
// added leave the publication, and the removed ones, which had not left
// it, send every change all along. A table already published (a table
// renamed upstream, followed under its new name) is not one it added:
// the undo leaves it. A change whose Finish never ran (its coordinator
// stopped after storing it) left its removed table published; the next
// change's Finish takes it out.
func TestAChangeNotStoredIsUndoneAndWhatAStoredOneLeftIsTakenOutByTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, dsn, uri, pos := pinAB(t, "", "undone")
	psql(t, srv, dsn, `CREATE TABLE c (id int4 PRIMARY KEY, v text)`)
	at := model.TsFromTime(time.Now())
	ch, err := Retable(ctx, uri, pos, []string{"a", "c"}, at, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := members(t, srv, dsn, "cdcctl_undone"); got != "a,b,c viaroot=false" || ch.Undo == nil {
		t.Fatalf("before the change is stored: %s", got)
	}
	if err := ch.Undo(ctx); err != nil {
		t.Fatal(err)
	}
	if got := members(t, srv, dsn, "cdcctl_undone"); got != "a,b viaroot=false" {
		t.Fatalf("after the undo: %s", got)
	}

	// b renamed to b2 and followed: b2 is the relation published all
	// along, not added; the undo takes nothing out.
	psql(t, srv, dsn, `ALTER TABLE b RENAME TO b2`)
	ch, err = Retable(ctx, uri, pos, []string{"a", "b2"}, at, true)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Undo != nil {
		if err := ch.Undo(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := members(t, srv, dsn, "cdcctl_undone"); got != "a,b2 viaroot=false" {
		t.Fatalf("after the rename's change was undone: %s", got)
	}

	// Stored, its Finish not run: b2 stays. The next change, stored and
	// finished, takes it out with its own.
	removed, err := Retable(ctx, uri, pos, []string{"a"}, at, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed.Unpublished, []string{"public.b"}) {
		t.Fatalf("the removed table, renamed upstream, is to leave as %q; want public.b, the name the changefeed knew", removed.Unpublished)
	}
	if got := members(t, srv, dsn, "cdcctl_undone"); got != "a,b2 viaroot=false" {
		t.Fatalf("a change stored, its Finish not run: %s", got)
	}
	// A table put in the publication by hand leaves with it: a dry run
	// of the change names both and changes nothing.
	psql(t, srv, dsn, `CREATE TABLE d (id int4 PRIMARY KEY); ALTER PUBLICATION cdcctl_undone ADD TABLE d`)
	dry, err := Retable(ctx, removed.URI, removed.Position, []string{"a", "c"}, at, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(dry.Unpublished, ","); got != "public.b2,public.d" || dry.Finish != nil {
		t.Fatalf("a dry run says the publication loses %q (a Finish: %v); want public.b2,public.d and none", got, dry.Finish != nil)
	}
	if got := members(t, srv, dsn, "cdcctl_undone"); got != "a,b2,d viaroot=false" {
		t.Fatalf("after a dry run: %s", got)
	}
	retable(t, removed.URI, removed.Position, []string{"a", "c"}, at)
	if got := members(t, srv, dsn, "cdcctl_undone"); got != "a,c viaroot=false" {
		t.Fatalf("after the next change: %s", got)
	}
}

// A partition replaced by its partitioned table (the table now
// replicated whole, its partitions' rows under its name): the
// publication names the root, publishes via it, and no longer names the
// partition, which pg_publication_tables hides once the root is
// published via root (before, it stayed a member for good). Undone, the
// publication is as it was: the partition alone, not via its root. The
// root replaced by its partitions leaves with their add.
func TestAPartitionReplacedByItsRootLeavesThePublication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, dsn := newDB(t, `CREATE TABLE r (id int4 PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE p1 PARTITION OF r FOR VALUES FROM (0) TO (100);
		CREATE TABLE p2 PARTITION OF r FOR VALUES FROM (100) TO (200)`)
	uri, pos, err := Pin(ctx, dsn+"&tables=p1", "rootleaves", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	at := model.TsFromTime(time.Now())
	// The partition it replaces is named as leaving, by a dry run and
	// by the change, which takes it out with the add.
	for _, apply := range []bool{false, true} {
		dry, err := Retable(ctx, uri, pos, []string{"r"}, at, apply)
		if err != nil || !slices.Equal(dry.Unpublished, []string{"public.p1"}) {
			t.Fatalf("apply=%v: the publication is to lose %q (%v); want public.p1", apply, dry.Unpublished, err)
		}
		if apply {
			if err := dry.Undo(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := members(t, srv, dsn, "cdcctl_rootleaves"); got != "p1 viaroot=false" {
		t.Fatalf("after the undo: %s", got)
	}
	back := retable(t, uri, pos, []string{"r"}, at)
	if got := members(t, srv, dsn, "cdcctl_rootleaves"); got != "r viaroot=true" {
		t.Fatalf("after the change: %s", got)
	}

	// And back to its partitions: the root leaves with their add, before
	// the change is stored (named with them, it would send their rows as
	// its own, which the changefeed no longer replicates); undone, it is
	// back and they are out.
	ch, err := Retable(ctx, back.URI, back.Position, []string{"p1", "p2"}, at, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := members(t, srv, dsn, "cdcctl_rootleaves"); got != "p1,p2 viaroot=true" {
		t.Fatalf("the partitions added, before the change is stored: %s", got)
	}
	if err := ch.Undo(ctx); err != nil {
		t.Fatal(err)
	}
	if got := members(t, srv, dsn, "cdcctl_rootleaves"); got != "r viaroot=true" {
		t.Fatalf("after the undo: %s", got)
	}
}
