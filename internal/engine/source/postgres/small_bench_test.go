package postgres

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkSmallTablesAgainstCopy measures the initial snapshot of many
// small tables, where a chunk's own round trips and watermarks weigh
// most: 100 tables of 8,000 rows, one partition each, all copying at once
// as one node's dispatchers do (chunks between watermarks, through the
// event log), against, as the baseline, COPY ... TO STDOUT of the same
// tables by four connections at once, the source's own pool (copyConns),
// 25 tables each. The tables are analyzed, as autovacuum keeps a
// database's tables. It reports both and their ratio.
//
//	go test -run '^$' -bench SmallTablesAgainstCopy -benchtime 3x ./internal/engine/source/postgres
func BenchmarkSmallTablesAgainstCopy(b *testing.B) {
	const tables, rows = 100, 8000
	var ddl, names []string
	for i := range tables {
		name := fmt.Sprintf("small%03d", i)
		ddl = append(ddl, fmt.Sprintf(`CREATE TABLE %s (id int8 PRIMARY KEY, v text, n numeric(12,2), at timestamptz, flag bool);
			INSERT INTO %s SELECT g, md5(g::text), g / 7.0, now(), g %% 2 = 0 FROM generate_series(1, %d) g;
			ANALYZE %s`, name, name, rows, name))
		names = append(names, name)
	}
	_, dsn := newDB(b, strings.Join(ddl, ";\n"))
	uri := dsn + "&tables=" + strings.Join(names, ",")
	var ours, flat time.Duration
	for i := 0; i < b.N; i++ {
		flat += copyTables(b, dsn, names, copyConns)

		name := model.ChangefeedID(fmt.Sprintf("small_%d", i))
		rig := startCopyRig(b, uri, name)
		rig.count = true
		began := time.Now() // the slot is created: only the copy is timed
		var ps []*partition
		for _, t := range names {
			ps = append(ps, rig.run(model.Span{Table: "public." + t, Key: "int8"}, rig.start, model.CopyProgress{}))
		}
		for _, p := range ps {
			p.waitDone(b)
		}
		ours += time.Since(began)
		n := 0
		for _, p := range ps {
			p.stopped(b)
			n += p.n
		}
		if n < tables*rows {
			b.Fatalf("%d partitions read %d rows of %d", tables, n, tables*rows)
		}
		rig.stop(b)
		pc, _ := ParseURI(uri)
		_ = Remove(context.Background(), pc.WithNames(string(name)))
	}
	all := float64(tables * rows * b.N)
	b.ReportMetric(all/ours.Seconds(), "rows/s")
	b.ReportMetric(all/flat.Seconds(), "copy-rows/s")
	b.ReportMetric(flat.Seconds()/ours.Seconds(), "ratio")
}

// copyTables times COPY ... TO STDOUT of every table of names by conns
// connections at once (timeCopies).
func copyTables(b *testing.B, dsn string, names []string, conns int) time.Duration {
	copies := make([]string, len(names))
	for i, n := range names {
		copies[i] = "COPY public." + n + " TO STDOUT"
	}
	return timeCopies(b, dsn, copies, conns)
}

// timeCopies times the COPY ... TO STDOUT statements copies run by conns
// connections at once (made before the clock starts), each taking the
// next statement not yet run.
func timeCopies(b *testing.B, dsn string, copies []string, conns int) time.Duration {
	ctx := context.Background()
	next := make(chan string, len(copies))
	for _, q := range copies {
		next <- q
	}
	close(next)
	cs := make([]*pgconn.PgConn, conns)
	for k := range cs {
		c, err := pgconn.Connect(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		cs[k] = c
	}
	errs := make(chan error, conns)
	began := time.Now()
	for _, c := range cs {
		go func() {
			for q := range next {
				if _, err := c.CopyTo(ctx, io.Discard, q); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range cs {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(began)
	for _, c := range cs {
		_ = c.Close(ctx)
	}
	return took
}
