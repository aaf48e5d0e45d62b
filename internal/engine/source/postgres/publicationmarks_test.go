package postgres

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
)

// A table taken out of the publication and put back before the reader's
// next look at the catalog is held all the same, at the ALTER that took
// it out: the marks its changefeed's event triggers write before and
// after each ALTER PUBLICATION say so in the stream. The row written
// while it was out is lost, and the hold says so; the row written after
// it was put back does not arrive as if nothing had happened. A reader
// started again from before the removal, with the table published
// again, holds it too. ALTER PUBLICATIONs that leave the changefeed's
// tables in (another table added, an option set) hold nothing. Before,
// such a removal went unseen: the look was the only way to find one.
func TestATableOutOfThePublicationBetweenTwoLooksIsHeld(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text);
		CREATE TABLE other (id int4 PRIMARY KEY, v text)`)
	needMessages(t, srv)
	// Looks an hour apart: none between the removal and the put-back.
	uri, pos, err := Pin(context.Background(), dsn+"&tables=a,b&catalog-interval=1h", "briefly", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	run := startReading(t, uri, "briefly", pos)
	psql(t, srv, dsn, `INSERT INTO a VALUES (1, 'a1'); INSERT INTO b VALUES (1, 'b1')`)
	run.until(t, "the first rows", func() bool { return logHas(run.log, "public.a", "a1") && logHas(run.log, "public.b", "b1") })
	// Each in a transaction of its own.
	for _, q := range []string{
		`ALTER PUBLICATION ` + cfg.Publication + ` ADD TABLE other`,
		`ALTER PUBLICATION ` + cfg.Publication + ` SET (publish = 'insert, update, delete, truncate')`,
		`INSERT INTO b VALUES (2, 'b2')`,
		`ALTER PUBLICATION ` + cfg.Publication + ` DROP TABLE b`,
		`INSERT INTO b VALUES (3, 'lost')`,
		`ALTER PUBLICATION ` + cfg.Publication + ` ADD TABLE b`,
		`INSERT INTO b VALUES (4, 'after')`,
		`INSERT INTO a VALUES (2, 'a2')`,
	} {
		psql(t, srv, dsn, q)
	}
	held := func(r *reading) *source.TableIssue { return r.issue("public.b", source.TableHeld) }
	run.until(t, "a2, and b held", func() bool { return logHas(run.log, "public.a", "a2") && held(run) != nil })
	if r := held(run).Reason; !strings.Contains(r, "not in publication "+cfg.Publication) || !strings.Contains(r, "changefeed update briefly --copy-table public.b") {
		t.Fatalf("the hold says: %s", r)
	}
	if !logHas(run.log, "public.b", "b2") || logHas(run.log, "public.b", "after") {
		t.Fatalf("b's row before the removal arrived %v (want true), its row after the put-back %v (want false)", logHas(run.log, "public.b", "b2"), logHas(run.log, "public.b", "after"))
	}
	if i := run.issue("public.a", source.TableHeld); i != nil {
		t.Fatalf("a, never out of the publication, is held: %+v", i)
	}
	run.stop(t)

	// From the same resume point, the table published all along as far as
	// the catalog now tells.
	again := startReading(t, uri, "briefly", pos)
	again.until(t, "a2 again, and b held", func() bool { return logHas(again.log, "public.a", "a2") && held(again) != nil })
	if logHas(again.log, "public.b", "after") {
		t.Fatal("the second run passed b's row after the put-back on")
	}
	again.stop(t)
}

// publish_via_partition_root turned off and on again between two looks:
// while it was off the partitioned table's rows went under its
// partitions' names, which the changefeed does not replicate; the table
// is held at the ALTER that turned it off, naming the setting.
func TestAPartitionedTableSentUnderItsPartitionsBetweenTwoLooksIsHeld(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE m (id int4 PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE m_1 PARTITION OF m FOR VALUES FROM (0) TO (1000);
		CREATE TABLE a (id int4 PRIMARY KEY, v text)`)
	needMessages(t, srv)
	uri, pos, err := Pin(context.Background(), dsn+"&tables=m,a&catalog-interval=1h", "viaroot", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	run := startReading(t, uri, "viaroot", pos)
	for _, q := range []string{
		`INSERT INTO m VALUES (1, 'm1')`,
		`ALTER PUBLICATION ` + cfg.Publication + ` SET (publish_via_partition_root = false)`,
		`INSERT INTO m VALUES (2, 'lost')`,
		`ALTER PUBLICATION ` + cfg.Publication + ` SET (publish_via_partition_root = true)`,
		`INSERT INTO m VALUES (3, 'after')`,
		`INSERT INTO a VALUES (1, 'a1')`,
	} {
		psql(t, srv, dsn, q)
	}
	held := func() *source.TableIssue { return run.issue("public.m", source.TableHeld) }
	run.until(t, "a1, and m held", func() bool { return logHas(run.log, "public.a", "a1") && held() != nil })
	if r := held().Reason; !strings.Contains(r, "publish_via_partition_root off") {
		t.Fatalf("the hold says: %s", r)
	}
	if !logHas(run.log, "public.m", "m1") || logHas(run.log, "public.m", "after") {
		t.Fatalf("m's row before arrived %v (want true), its row after %v (want false)", logHas(run.log, "public.m", "m1"), logHas(run.log, "public.m", "after"))
	}
	run.stop(t)
}

// An ALTER PUBLICATION that stops sending a kind of change (publish=)
// holds every table of the changefeed, naming what it no longer sends;
// one that gives a table a row filter (PostgreSQL 15 and later) holds
// that table. The changes left out were lost, only warned of by
// changefeed get before.
func TestAPublicationSendingLessHoldsWhatItLeavesOut(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text);
		CREATE TABLE c (id int4 PRIMARY KEY, v text)`)
	v := needMessages(t, srv)
	for i, c := range []struct {
		name, alter, table, want string
		since                    int
	}{
		{"publish", `SET (publish = 'insert, update, truncate')`, "public.c", "no longer sends deletes", 0},
		{"filter", `SET TABLE a, b, c WHERE (id > 5)`, "public.c", "sends only some of its rows or columns now", 150000},
	} {
		if v < c.since {
			continue
		}
		cf := model.ChangefeedID("less_" + c.name)
		uri, pos, err := Pin(context.Background(), dsn+"&tables=a,b,c&catalog-interval=1h", cf, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ParseURI(uri)
		if err != nil {
			t.Fatal(err)
		}
		run := startReading(t, uri, cf, pos)
		psql(t, srv, dsn, `ALTER PUBLICATION `+cfg.Publication+` `+c.alter)
		psql(t, srv, dsn, `INSERT INTO a VALUES (`+strconv.Itoa(100+i)+`, '`+c.name+`')`)
		run.until(t, c.table+" held", func() bool { return run.issue(c.table, source.TableHeld) != nil })
		if r := run.issue(c.table, source.TableHeld).Reason; !strings.Contains(r, c.want) || !strings.Contains(r, "--copy-table "+c.table) {
			t.Fatalf("%s: the hold says: %s", c.name, r)
		}
		run.stop(t)
	}
}

// needMessages skips a test of the changefeed's marks on PostgreSQL 13,
// whose pgoutput carries no messages (the catalog's look alone finds
// what they find); it returns server_version_num.
func needMessages(t *testing.T, srv *pgserver.Server) int {
	t.Helper()
	out, err := srv.Psql(context.Background(), "postgres", "SHOW server_version_num")
	v, _ := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || v < 140000 {
		t.Skipf("PostgreSQL 13's pgoutput carries no messages (server_version_num %q, %v)", strings.TrimSpace(out), err)
	}
	return v
}
