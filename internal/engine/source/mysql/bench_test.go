package mysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// BenchmarkSourceAgainstBareReader measures rows/s from MariaDB's binary
// log to a file sink through this source — the binary log decoded into
// rows with the schema the source keeps, appended to the event log, read
// back by key range, encoded as canal-json and written to files —
// against, as the baseline, a bare go-mysql binlog reader that only
// parses the same binary log (its rows events decoded, nothing else). It
// reports both and their ratio; the two alternate which reads first. The
// source runs as the agent runs it, its event log keeping the newest rows
// in memory; "store-ratio" is the same run's source with a log that
// writes every row into its store (as before the log kept any). Rows:
// 200,000 an iteration, or CDCCTL_BENCH_ROWS (rounded down to a
// multiple of 1,000): the ratio at 1,000,000 against 200,000 tells a
// cost paid once a run (connecting, opening the log) from one paid a row.
//
//	go test -run '^$' -bench SourceAgainstBareReader -benchtime 4x ./internal/engine/source/mysql
func BenchmarkSourceAgainstBareReader(b *testing.B) {
	rows, perTxn := 200_000, 1000
	if n, err := strconv.Atoi(os.Getenv("CDCCTL_BENCH_ROWS")); err == nil && n >= perTxn {
		rows = n / perTxn * perTxn
	}
	srv, db, cfg := streamBench(b)
	ctx := context.Background()
	var ours, stored, bare, oursCPU, bareCPU time.Duration
	for i := 0; i < b.N; i++ {
		cfg.Start = model.TsFromTime(time.Now())
		from, err := mysql.Begin(ctx, cfg, cfg.Start)
		if err != nil {
			b.Fatal(err)
		}
		insertRows(b, db, i*rows, rows, perTxn)
		runBare := func() {
			began, c0 := time.Now(), sourcetest.ProcessCPU(b)
			if got := bareRead(b, srv.Addr(), from, rows); got != rows {
				b.Fatalf("the bare reader parsed %d rows, want %d", got, rows)
			}
			bare += time.Since(began)
			bareCPU += sourcetest.ProcessCPU(b) - c0
		}
		runOurs := func(room *eventlog.Memory, took *time.Duration) func() {
			return func() {
				began, c0 := time.Now(), sourcetest.ProcessCPU(b)
				if got := throughTheSource(b, cfg, from, b.TempDir(), rows, false, room); got != rows {
					b.Fatalf("the source delivered %d rows, want %d", got, rows)
				}
				*took += time.Since(began)
				if room != nil {
					oursCPU += sourcetest.ProcessCPU(b) - c0
				}
			}
		}
		sides := []func(){runBare, runOurs(eventlog.NewMemory(eventlog.DefaultMemory), &ours), runOurs(nil, &stored)}
		for j := range sides {
			sides[(i+j)%len(sides)]()
		}
	}
	n := float64(rows * b.N)
	b.ReportMetric(n/ours.Seconds(), "rows/s")
	b.ReportMetric(n/bare.Seconds(), "bare-rows/s")
	b.ReportMetric(bare.Seconds()/ours.Seconds(), "ratio")
	b.ReportMetric(bare.Seconds()/stored.Seconds(), "store-ratio")
	// The process's CPU a row, every goroutine's (go-mysql reads the
	// network and decodes on goroutines of its own).
	b.ReportMetric(float64(oursCPU.Microseconds())/n, "cpu-us/row")
	b.ReportMetric(float64(bareCPU.Microseconds())/n, "bare-cpu-us/row")
}

// streamBench starts a MariaDB with an empty table bench, and the source
// configuration that streams it.
func streamBench(b *testing.B) (*mysqlserver.Server, *sql.DB, mysql.Config) {
	srv, db := mysqltest.StartShop(b)
	if _, err := db.Exec(`CREATE TABLE bench (id BIGINT PRIMARY KEY, v VARCHAR(40), n DECIMAL(12,2), at DATETIME(6), flag TINYINT)`); err != nil {
		b.Fatal(err)
	}
	cfg, err := mysql.ParseURI("mysql://root@" + srv.Addr() + "/shop?tables=bench&snapshot=never&server-id=4242")
	if err != nil {
		b.Fatal(err)
	}
	return srv, db, cfg
}

// insertRows inserts rows from first+1 on, perTxn to a transaction.
func insertRows(b *testing.B, db *sql.DB, first, rows, perTxn int) {
	b.Helper()
	for t := 0; t < rows/perTxn; t++ {
		vals := make([]string, 0, perTxn)
		for id := first + t*perTxn + 1; id <= first+(t+1)*perTxn; id++ {
			vals = append(vals, fmt.Sprintf("(%d, MD5(%d), %d / 7.0, NOW(6), %d)", id, id, id, id%2))
		}
		if _, err := db.Exec("INSERT INTO bench VALUES " + strings.Join(vals, ", ")); err != nil {
			b.Fatal(err)
		}
	}
}

// bareRead streams the binary log from a resume point with go-mysql's
// syncer and counts the rows its rows events decode: the least any
// binary log consumer does.
func bareRead(b *testing.B, addr string, from source.Position, want int) int {
	var at struct {
		File string `json:"file"`
		Pos  uint32 `json:"pos"`
	}
	if err := json.Unmarshal(from, &at); err != nil {
		b.Fatal(err)
	}
	host, port, _ := strings.Cut(addr, ":")
	var p uint16
	fmt.Sscan(port, &p)
	// ParseTime as the source has it: DATETIMEs decoded as times, not
	// formatted as text (the least a reader must do).
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: 4343, Flavor: "mariadb", Host: host, Port: p, User: "root",
		ParseTime: true, Logger: slog.New(slog.DiscardHandler)})
	defer syncer.Close()
	stream, err := syncer.StartSync(gomysql.Position{Name: at.File, Pos: at.Pos})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for n < want {
		ev, err := stream.GetEvent(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if re, ok := ev.Event.(*replication.RowsEvent); ok && string(re.Table.Table) == "bench" {
			n += len(re.Rows)
		}
	}
	return n
}

// throughTheSource runs the data path as the engine does, on two
// goroutines: the puller appends to the event log (on disk, as the agent
// keeps it) while a partition's reader reads the table's span back and
// writes it to a storage sink, until want rows are written. With meta,
// the log numbers the transactions' rows and keeps their summaries, and
// the sink writes transaction boundaries (transaction-meta=true).
func throughTheSource(b *testing.B, cfg mysql.Config, from source.Position, dir string, want int, meta bool, room *eventlog.Memory) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// On disk, with the newest rows in the room given (the agent's is
	// --log-memory-mib).
	log, err := eventlog.Open(filepath.Join(dir, "eventlog"), 0, eventlog.Options{Transactions: meta, Memory: room})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	uri := "file://" + dir + "/sink?file-size=4194304&flush-interval=1s"
	if meta {
		uri += "&transaction-meta=true"
	}
	s, err := storage.Open(ctx, uri, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w := &notifyingLog{Log: log, appended: make(chan model.Ts, 1)}
	got, done := 0, make(chan error, 1)
	go func() {
		// The partition: read what is resolved, write it, wait for more.
		defer cancel()
		span, pos := model.Span{Table: "shop.bench"}, source.Cursor{}
		for got < want {
			var upTo model.Ts
			select {
			case upTo = <-w.appended:
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
			for got < want {
				rows, next, err := log.Read(span, pos, upTo, 4096)
				if err != nil {
					done <- err
					return
				}
				pos = next
				if len(rows) == 0 {
					break
				}
				batch := &sink.Batch{Dispatcher: "p1.1", Events: rows}
				if meta {
					// The summaries beside the rows, as the dispatcher
					// hands them over.
					batch.Events, batch.Txns = nil, nil
					for _, e := range rows {
						if e.Kind == source.KindTxn {
							batch.Txns = append(batch.Txns, e)
						} else {
							batch.Events = append(batch.Events, e)
						}
					}
				}
				got += len(batch.Events)
				if err := s.Write(ctx, batch); err != nil {
					done <- err
					return
				}
			}
		}
		done <- s.Flush(ctx, "p1.1")
	}()
	p := mysql.NewPuller(cfg, "bench", "mariadb", nil)
	if err := p.Pull(ctx, from, w); err != nil && ctx.Err() == nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return got
}

// notifyingLog is the event log a benchmark's puller appends to; it
// tells the reader the last position appended.
type notifyingLog struct {
	*eventlog.Log
	appended chan model.Ts
}

func (w *notifyingLog) Append(evs []source.Event) error {
	if err := w.Log.Append(evs); err != nil {
		return err
	}
	at := evs[len(evs)-1].CommitTs
	w.Log.Resolve(at)
	select {
	case <-w.appended: // the reader has not taken the older one: this one is later
	default:
	}
	w.appended <- at
	return nil
}

// BenchmarkSnapshotAgainstSelect measures the initial snapshot's rows/s
// through the engine — a changefeed of one table cut into four
// partitions on two captures, each copying its key range in chunks
// between watermarks, through the event log into a file sink — from the
// changefeed's creation to every partition done, against, as the
// baseline, SELECT * ... ORDER BY id of the same table read flat out by
// one client. It reports both and their ratio. The table has 1,000,000
// rows, or CDCCTL_BENCH_ROWS (rounded down to a multiple of 5,000); its
// key is characters with CDCCTL_BENCH_KEY=chars (benchTable).
//
//	go test -run '^$' -bench SnapshotAgainstSelect -benchtime 3x ./internal/engine/source/mysql
func BenchmarkSnapshotAgainstSelect(b *testing.B) {
	rows := 1_000_000
	if n, err := strconv.Atoi(os.Getenv("CDCCTL_BENCH_ROWS")); err == nil && n >= 5000 {
		rows = n / 5000 * 5000
	}
	srv, db := benchTable(b, rows)
	tc := enginetest.New(b, enginetest.Options{LogMemory: eventlog.DefaultMemory}) // as an agent keeps its logs
	tc.StartCaptures(2)
	var ours, flat time.Duration
	for i := 0; i < b.N; i++ {
		flat += timeSelect(b, db, rows)

		ours += tc.TimeSnapshot(model.ChangefeedID(fmt.Sprintf("snap-%d", i)), "mysql://root@"+srv.Addr()+"/shop?tables=bench", b.TempDir(), 4, rows)
	}
	n := float64(rows * b.N)
	b.ReportMetric(n/ours.Seconds(), "rows/s")
	b.ReportMetric(n/flat.Seconds(), "select-rows/s")
	b.ReportMetric(flat.Seconds()/ours.Seconds(), "ratio")
}

// timeSelect times SELECT * FROM bench ORDER BY id read flat out by one
// client (text protocol, values not copied): the snapshot's baseline.
func timeSelect(b *testing.B, db *sql.DB, rows int) time.Duration {
	b.Helper()
	began := time.Now()
	r, err := db.Query("SELECT * FROM bench ORDER BY id")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	vals := make([]sql.RawBytes, 5)
	ptrs := []any{&vals[0], &vals[1], &vals[2], &vals[3], &vals[4]}
	n := 0
	for r.Next() {
		if err := r.Scan(ptrs...); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if n != rows {
		b.Fatalf("read %d rows, want %d", n, rows)
	}
	return time.Since(began)
}

// BenchmarkSnapshotSourceAgainstSelect measures the source's share of the
// initial snapshot, as PostgreSQL's BenchmarkSnapshotAgainstCopy does:
// a table of 1,000,000 rows copied in key-ordered chunks between
// watermarks that come back through the binary log, the changefeed's
// reader and an event log, by partitions reading as dispatchers read (no
// encoding, no sink), once by one partition and once by four at the same
// time, timed from the partitions' start; against SELECT * ... ORDER BY
// id read flat out by one client. BenchmarkSnapshotAgainstSelect times
// the whole engine into a file sink instead.
//
//	go test -run '^$' -bench SnapshotSourceAgainstSelect -benchtime 2x ./internal/engine/source/mysql
func BenchmarkSnapshotSourceAgainstSelect(b *testing.B) {
	const rows = 1_000_000
	srv, db := benchTable(b, rows)
	uri := "mysql://root@" + srv.Addr() + "/shop?tables=bench"
	var flat, one, four time.Duration
	for i := 0; i < b.N; i++ {
		flat += timeSelect(b, db, rows)
		one += copyThroughTheSource(b, uri, fmt.Sprintf("snapsrc-%d-1", i), 1, rows)
		four += copyThroughTheSource(b, uri, fmt.Sprintf("snapsrc-%d-4", i), 4, rows)
	}
	sourcetest.ReportCopies(b, rows*b.N, one, four, flat, "select")
}

// copyThroughTheSource creates changefeed cf's position, pulls its binary
// log into an in-memory event log and copies table bench (ids 1..rows)
// by parts partitions of equal key ranges; it returns the copy's time.
func copyThroughTheSource(b testing.TB, uri, cf string, parts, rows int) time.Duration {
	b.Helper()
	ctx := context.Background()
	stored, pos, err := mysql.Pin(ctx, uri, model.ChangefeedID(cf), time.Now())
	if err != nil {
		b.Fatal(err)
	}
	defer mysql.RemoveURI(ctx, stored) //nolint:errcheck // the next iteration has its own name
	return copyPinned(b, stored, pos, cf, parts, rows)
}

// copyPinned is copyThroughTheSource of a changefeed pinned already.
func copyPinned(b testing.TB, stored string, pos source.Position, cf string, parts, rows int) time.Duration {
	b.Helper()
	ctx := context.Background()
	cfg, err := mysql.ParseURI(stored)
	if err != nil {
		b.Fatal(err)
	}
	log, err := eventlog.Open("", cfg.Start, eventlog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	src, err := mysql.Open(stored, source.Env{Changefeed: model.ChangefeedID(cf), Logs: eventlog.Local{Log: log}})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	pctx, cancel := context.WithCancel(ctx)
	pulled := make(chan error, 1)
	go func() { pulled <- src.Pull(pctx, pos, log) }()
	defer func() {
		cancel()
		if err := <-pulled; err != nil && !errors.Is(err, context.Canceled) {
			b.Fatal(err)
		}
	}()
	began := time.Now()
	counts := sourcetest.CopySpans(b, src, cfg.Start, sourcetest.IntSpans("shop.bench", rows, parts))
	took := time.Since(began)
	total := 0
	for _, c := range counts {
		total += c
	}
	if total < rows {
		b.Fatalf("%d partitions read %d rows of %d", parts, total, rows)
	}
	return took
}

// benchTable starts MariaDB with table shop.bench of rows rows (ids
// 1..rows), the snapshot benchmarks' table. With CDCCTL_BENCH_KEY=chars
// its key is a VARCHAR under a collation that folds case ('sku-1',
// 'SKU-2', 'Sku-3', …), which partitions copy in the index's order.
func benchTable(b *testing.B, rows int) (*mysqlserver.Server, *sql.DB) {
	b.Helper()
	srv, db := mysqltest.StartShop(b)
	if os.Getenv("CDCCTL_BENCH_KEY") == "chars" {
		for _, q := range []string{
			`CREATE TABLE bench (id VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, v VARCHAR(40), n DECIMAL(12,2), at DATETIME(6), flag TINYINT)`,
			fmt.Sprintf(`INSERT INTO bench SELECT CONCAT(ELT(seq %% 3 + 1, 'sku-', 'SKU-', 'Sku-'), seq), MD5(seq), seq / 7.0, NOW(6), seq %% 2 FROM seq_1_to_%d`, rows),
			`ANALYZE TABLE bench`,
		} {
			if _, err := db.Exec(q); err != nil {
				b.Fatal(err)
			}
		}
		return srv, db
	}
	if _, err := db.Exec(`CREATE TABLE bench (id BIGINT PRIMARY KEY, v VARCHAR(40), n DECIMAL(12,2), at DATETIME(6), flag TINYINT)`); err != nil {
		b.Fatal(err)
	}
	insertRows(b, db, 0, rows, 5000)
	return srv, db
}
