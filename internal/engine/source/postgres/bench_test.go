package postgres

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkSourceAgainstBareReader measures rows/s from PostgreSQL to a
// file sink through this source — the pgoutput stream decoded into typed
// rows, appended to the event log, read back by key range, encoded as
// canal-json and written to files — against, as the baseline, a bare
// pglogrepl reader that only decodes the same WAL (a second slot with
// the same publication). It reports both and their ratio.
//
//	go test -run '^$' -bench SourceAgainstBareReader -benchtime 4x ./internal/engine/source/postgres
func BenchmarkSourceAgainstBareReader(b *testing.B) {
	const rows, perTxn = 200_000, 1000
	srv, dsn := newDB(b, `CREATE TABLE bench (id int8 PRIMARY KEY, v text, n numeric(12,2), at timestamptz, flag bool)`)
	ctx := context.Background()
	var ours, bare, oursCPU, bareCPU time.Duration
	for i := 0; i < b.N; i++ {
		cfg, err := ParseURI(dsn + "&tables=bench")
		if err != nil {
			b.Fatal(err)
		}
		cfg = cfg.WithNames(fmt.Sprintf("bench_%d", i))
		up, err := Prepare(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		// The baseline's slot, created at the same point of the WAL.
		base := cfg
		base.Slot = fmt.Sprintf("bare_%d", i)
		bup, err := Prepare(ctx, base)
		if err != nil {
			b.Fatal(err)
		}
		first := i * rows
		psql(b, srv, dsn, fmt.Sprintf(`DO $$ BEGIN FOR t IN 0..%d LOOP
			INSERT INTO bench SELECT g, md5(g::text), g / 7.0, now(), g %% 2 = 0 FROM generate_series(%d + t * %d + 1, %d + (t + 1) * %d) g;
			COMMIT; END LOOP; END $$`, rows/perTxn-1, first, perTxn, first, perTxn))

		// Both decode the same WAL; whichever reads it first may find it
		// colder, so the order alternates.
		runBare := func() {
			began, cpu := time.Now(), sourcetest.ProcessCPU(b)
			if got := bareRead(b, base, bup.StartLSN, rows); got != rows {
				b.Fatalf("the bare reader decoded %d rows, want %d", got, rows)
			}
			bare += time.Since(began)
			bareCPU += sourcetest.ProcessCPU(b) - cpu
		}
		runOurs := func() {
			// Opened here, not before the bare reader runs: its walsender
			// would decode ahead meanwhile, and ours would look faster.
			began, cpu := time.Now(), sourcetest.ProcessCPU(b)
			st, err := OpenStream(ctx, cfg, up.StartLSN, 0, map[string]TableState{"public.bench": {Def: up.Defs["public.bench"]}}, false, "")
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			if got := throughTheSource(b, st, b.TempDir(), rows); got != rows {
				b.Fatalf("the source delivered %d rows, want %d", got, rows)
			}
			ours += time.Since(began)
			oursCPU += sourcetest.ProcessCPU(b) - cpu
		}
		if i%2 == 0 {
			runBare()
			runOurs()
		} else {
			runOurs()
			runBare()
		}
		_ = Remove(ctx, base)
		_ = Remove(ctx, cfg)
	}
	n := float64(rows * b.N)
	b.ReportMetric(n/ours.Seconds(), "rows/s")
	b.ReportMetric(n/bare.Seconds(), "bare-rows/s")
	b.ReportMetric(bare.Seconds()/ours.Seconds(), "ratio")
	// What each side cost this process: the walsender's pace, which
	// both wait on, does not change it much.
	b.ReportMetric(float64(oursCPU.Microseconds())/n, "cpu-us/row")
	b.ReportMetric(float64(bareCPU.Microseconds())/n, "bare-cpu-us/row")
}

// bareRead streams a slot and decodes every message with pglogrepl,
// counting inserts: the least any pgoutput consumer does.
func bareRead(b *testing.B, cfg Config, from pglogrepl.LSN, want int) int {
	ctx := context.Background()
	pc, err := pgconn.ParseConfig(cfg.ConnString)
	if err != nil {
		b.Fatal(err)
	}
	pc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := pglogrepl.StartReplication(ctx, conn, cfg.Slot, from, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", cfg.Publication)},
	}); err != nil {
		b.Fatal(err)
	}
	n := 0
	for n < want {
		raw, err := conn.ReceiveMessage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		cd, ok := raw.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		if bareInsert(b, cd.Data) {
			n++
		}
	}
	return n
}

// bareInsert parses an XLogData message and what it carries with
// pglogrepl, and says whether it is an insert: all the bare reader does
// with a message.
func bareInsert(b *testing.B, data []byte) bool {
	x, err := pglogrepl.ParseXLogData(data[1:])
	if err != nil {
		b.Fatal(err)
	}
	m, err := pglogrepl.Parse(x.WALData)
	if err != nil {
		b.Fatal(err)
	}
	_, ok := m.(*pglogrepl.InsertMessage)
	return ok
}

// throughTheSource runs the data path as a node runs it: the
// changefeed's reader (the stream decoded and appended to the event log)
// on one goroutine, a partition's dispatcher (a key-range read of the
// log, encoded into the storage sink) on another, woken when the log
// changes.
func throughTheSource(b *testing.B, st *Stream, dir string, want int) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// On disk with the newest rows in memory, as the agent keeps it
	// (<data-dir>/eventlog/<changefeed>, --log-memory-mib's default).
	log, err := eventlog.Open(filepath.Join(dir, "eventlog"), 0, eventlog.Options{Memory: eventlog.NewMemory(eventlog.DefaultMemory)})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	s, err := storage.Open(ctx, "file://"+dir+"/sink?file-size=4194304&flush-interval=1s", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	read := make(chan error, 1)
	go func() {
		read <- func() error {
			for {
				it, err := st.Next(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				switch {
				case it.Part != nil:
					err = log.AppendPart(it.Part)
				case it.Txn != nil:
					err = log.Append(it.Txn.Events)
					log.Resolve(it.Txn.Ts)
				}
				if err != nil {
					return err
				}
			}
		}()
	}()
	span := model.Span{Table: "public.bench"}
	pos, got := source.Cursor{}, 0
	for got < want {
		changed := log.Changed()
		evs, next, err := log.Read(span, pos, log.Resolved(), 4096)
		if err != nil {
			b.Fatal(err)
		}
		pos = next
		if len(evs) == 0 {
			select {
			case <-changed:
			case err := <-read:
				b.Fatalf("the reader stopped: %v", err)
			}
			continue
		}
		got += len(evs)
		if err := s.Write(ctx, &sink.Batch{Dispatcher: "p1.1", Events: evs}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(ctx, "p1.1"); err != nil {
		b.Fatal(err)
	}
	cancel()
	if err := <-read; err != nil {
		b.Fatal(err)
	}
	return got
}

// BenchmarkSnapshotAgainstCopy measures the initial snapshot's rows/s
// (key-ordered chunks between watermarks, through the event log, into
// partitions reading as dispatchers do), copied by one partition and by
// four at once, against, as the baseline, COPY ... TO STDOUT of the same
// table, the fastest way to read it out of PostgreSQL; and the four
// partitions against four COPYs of their key ranges at once (issue 34's
// baseline for them). The table is analyzed, as autovacuum keeps a
// database's tables. It reports each and their ratios.
//
//	go test -run '^$' -bench SnapshotAgainstCopy -benchtime 3x ./internal/engine/source/postgres
func BenchmarkSnapshotAgainstCopy(b *testing.B) {
	const rows = 200_000
	_, dsn := newDB(b, fmt.Sprintf(`CREATE TABLE snap (id int8 PRIMARY KEY, v text, n numeric(12,2), at timestamptz, flag bool);
		INSERT INTO snap SELECT g, md5(g::text), g / 7.0, now(), g %% 2 = 0 FROM generate_series(1, %d) g;
		ANALYZE snap`, rows))
	ctx := context.Background()
	var one, four, copyTime, copy4, copy4Unordered time.Duration
	snapshot := func(i, parts int) time.Duration {
		name := model.ChangefeedID(fmt.Sprintf("snapbench_%d_%d", i, parts))
		rig := startCopyRig(b, dsn+"&tables=snap", name)
		rig.count = true
		// Timed from the partitions' start: creating the slot is not reading.
		began := time.Now()
		var ps []*partition
		for _, span := range sourcetest.IntSpans("public.snap", rows, parts) {
			ps = append(ps, rig.run(span, rig.start, model.CopyProgress{}))
		}
		for _, p := range ps {
			p.waitDone(b)
		}
		took := time.Since(began)
		n := 0
		for _, p := range ps {
			p.stopped(b)
			n += p.n
		}
		if n < rows {
			b.Fatalf("%d partitions read %d rows of %d", parts, n, rows)
		}
		rig.stop(b)
		pc, _ := ParseURI(dsn + "&tables=snap")
		_ = Remove(ctx, pc.WithNames(string(name)))
		return took
	}
	for i := 0; i < b.N; i++ {
		cfg, err := ParseURI(dsn + "&tables=snap")
		if err != nil {
			b.Fatal(err)
		}
		conn, err := pgconn.Connect(ctx, cfg.ConnString)
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now() // connected: only the reading is timed
		if _, err := conn.CopyTo(ctx, io.Discard, "COPY public.snap TO STDOUT"); err != nil {
			b.Fatal(err)
		}
		_ = conn.Close(ctx)
		copyTime += time.Since(began)
		copy4 += parallelCopies(b, cfg.ConnString, rows, 4, true)
		copy4Unordered += parallelCopies(b, cfg.ConnString, rows, 4, false)
		one += snapshot(i, 1)
		four += snapshot(i, 4)
	}
	sourcetest.ReportCopies(b, rows*b.N, one, four, copyTime, "copy")
	// Issue 34's baseline for four partitions: four COPYs of their key
	// ranges at once, in key order as the partitions read them (and,
	// for comparison, in whatever order PostgreSQL reads them).
	b.ReportMetric(float64(rows*b.N)/copy4.Seconds(), "copy4-rows/s")
	b.ReportMetric(copy4.Seconds()/four.Seconds(), "ratio-4-to-copy4")
	b.ReportMetric(float64(rows*b.N)/copy4Unordered.Seconds(), "copy4-unordered-rows/s")
}

// parallelCopies times parts COPYs at once, each of one of parts equal
// ranges of public.snap's ids (1..rows), ordered by id or not, their
// connections made before the clock starts.
func parallelCopies(b *testing.B, dsn string, rows, parts int, ordered bool) time.Duration {
	order := ""
	if ordered {
		order = " ORDER BY id"
	}
	var copies []string
	for k := range parts {
		copies = append(copies, fmt.Sprintf("COPY (SELECT * FROM public.snap WHERE id >= %d AND id < %d%s) TO STDOUT", k*rows/parts+1, (k+1)*rows/parts+1, order))
	}
	return timeCopies(b, dsn, copies, parts)
}
