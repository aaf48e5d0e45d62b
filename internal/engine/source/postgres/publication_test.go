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
		!strings.Contains(st.Warnings[0], `ALTER PUBLICATION `+cfg.Publication+` ADD TABLE "public"."taken"`) {
		t.Fatalf("warnings: %q", st.Warnings)
	}
}
