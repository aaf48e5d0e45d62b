package postgres

import (
	"context"
	"strings"
	"testing"
)

// A table taken out of the changefeed's publication behind its back
// (ALTER PUBLICATION … DROP TABLE) sends no more changes, and nothing
// else says so: the source's status warns of it, with the fix, and of
// no other table (one dropped upstream is reported by its DROP).
func TestATableTakenOutOfThePublicationIsWarnedOf(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE kept (id int4 PRIMARY KEY); CREATE TABLE taken (id int4 PRIMARY KEY); CREATE TABLE dropped (id int4 PRIMARY KEY)`)
	_, cfg, _ := open(t, dsn+"&tables=public.kept,public.taken,public.dropped")
	ctx := context.Background()
	st, err := Inspect(ctx, cfg.URI(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) != 0 {
		t.Fatalf("warnings with every table published: %q", st.Warnings)
	}
	psql(t, srv, dsn, `ALTER PUBLICATION `+cfg.Publication+` DROP TABLE taken; DROP TABLE dropped`)
	if st, err = Inspect(ctx, cfg.URI(), nil); err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) != 1 || !strings.HasPrefix(st.Warnings[0], "public.taken is not in publication "+cfg.Publication) ||
		!strings.Contains(st.Warnings[0], `ALTER PUBLICATION `+cfg.Publication+` ADD TABLE ONLY "public"."taken"`) {
		t.Fatalf("warnings: %q", st.Warnings)
	}
}

// A publication changed behind the changefeed's back in what it sends,
// not only in its tables: deletes no longer published, a partitioned
// table's rows sent under its partitions' names (dropped as another
// table's). Each is warned of, with the fix.
func TestAPublicationChangedInWhatItSendsIsWarnedOf(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE kept (id int4 PRIMARY KEY);
		CREATE TABLE m (id int8, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE m_2024 PARTITION OF m FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`)
	_, cfg, _ := open(t, dsn+"&tables=public.kept,public.m")
	ctx := context.Background()
	if st, err := Inspect(ctx, cfg.URI(), nil); err != nil || len(st.Warnings) != 0 {
		t.Fatalf("warnings of the publication as made: %q (%v)", st.Warnings, err)
	}
	psql(t, srv, dsn, `ALTER PUBLICATION `+cfg.Publication+` SET (publish = 'insert, update, truncate', publish_via_partition_root = false)`)
	st, err := Inspect(ctx, cfg.URI(), nil)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(st.Warnings, "\n")
	for _, want := range []string{"does not publish every change (insert true, update true, delete false, truncate true)",
		"publishes the rows of partitioned table public.m under its children's names", "changed since the changefeed was created"} {
		if !strings.Contains(all, want) {
			t.Fatalf("warnings lack %q: %q", want, st.Warnings)
		}
	}
	if strings.Contains(all, "public.m is not in publication") {
		t.Fatalf("the root warned of as taken out of the publication: %q", st.Warnings)
	}
}
