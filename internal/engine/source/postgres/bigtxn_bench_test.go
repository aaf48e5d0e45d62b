package postgres

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// BenchmarkLargeTransactionRSS measures this process's peak resident
// memory while one large transaction (1 GiB of row text by default;
// CDCCTL_BIG_TXN_MB sets it) goes the whole data path: the slot's stream,
// the event log on disk, reads by key range, the storage sink's files.
// The baseline, in the same run, is the same path carrying a transaction
// a hundred times smaller: a reader that held transactions in memory
// would grow with the size; this one should not. It reports both peaks
// and their ratio.
//
//	go test -run '^$' -bench LargeTransactionRSS -benchtime 1x -timeout 60m ./internal/engine/source/postgres
func BenchmarkLargeTransactionRSS(b *testing.B) {
	mb := 1024
	if v, err := strconv.Atoi(os.Getenv("CDCCTL_BIG_TXN_MB")); err == nil && v > 0 {
		mb = v
	}
	// Rows of 992 characters of text: about a thousand a MiB.
	const rowText = 992
	srv, dsn := newDB(b, `CREATE TABLE big (id int8 PRIMARY KEY, v text)`)
	for i := 0; i < b.N; i++ {
		small := runLargeTransaction(b, srv, dsn, fmt.Sprintf("small_%d", i), 0, max(mb*1024/100, 1), rowText)
		big := runLargeTransaction(b, srv, dsn, fmt.Sprintf("big_%d", i), 10_000_000*(i+1), mb*1024, rowText)
		b.ReportMetric(float64(small)/(1<<20), "baseline-peak-MiB")
		b.ReportMetric(float64(big)/(1<<20), "peak-MiB")
		b.ReportMetric(float64(mb), "txn-MiB")
		b.ReportMetric(float64(big)/float64(small), "ratio")
	}
}

// runLargeTransaction creates a changefeed's slot, commits one
// transaction of rows, runs it through the data path and returns the
// peak RSS meanwhile.
func runLargeTransaction(b *testing.B, srv interface {
	Psql(context.Context, string, string) (string, error)
}, dsn, name string, first, rows, rowText int) int64 {
	ctx := context.Background()
	cf := model.ChangefeedID("rss_" + name)
	uri, pos, err := Pin(ctx, dsn+"&tables=big&snapshot=never", cf, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	src, err := Open(uri, source.Env{Changefeed: cf})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		pc, _ := ParseURI(uri)
		_ = Remove(ctx, pc)
	}()
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if _, err := srv.Psql(ctx, db, fmt.Sprintf(`INSERT INTO big SELECT g, repeat(md5(g::text), %d) FROM generate_series(%d, %d) g`,
		rowText/32, first+1, first+rows)); err != nil {
		b.Fatal(err)
	}
	log, err := eventlog.Open(b.TempDir(), 0, eventlog.Options{Memory: eventlog.NewMemory(eventlog.DefaultMemory)})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	sk, err := storage.Open(ctx, "file://"+b.TempDir()+os.Getenv("CDCCTL_BIG_TXN_SINK"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer sk.Close()

	resetPeakRSS(b)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pulled := make(chan error, 1)
	go func() { pulled <- src.Pull(pctx, pos, log) }()
	span := model.Span{Table: "public.big", Key: "int8"}
	cur, got := source.Cursor{}, 0
	for got < rows {
		changed := log.Changed()
		evs, next, err := log.Read(span, cur, model.Ts(1<<62), 1024)
		if err != nil {
			b.Fatal(err)
		}
		cur = next
		if len(evs) == 0 {
			select {
			case err := <-pulled:
				b.Fatalf("the reader stopped after %d rows: %v", got, err)
			case <-changed:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		got += len(evs)
		if err := sk.Write(ctx, &sink.Batch{Dispatcher: "p1.1", Events: evs}); err != nil {
			b.Fatal(err)
		}
	}
	if err := sk.Flush(ctx, "p1.1"); err != nil {
		b.Fatal(err)
	}
	return peakRSS(b)
}

// resetPeakRSS starts measuring the peak anew (Linux: clear_refs 5).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skipf("cannot reset the peak RSS here: %v", err)
	}
}

// peakRSS is the process's peak resident set since the last reset.
func peakRSS(b *testing.B) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc here: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Skip("no VmHWM in /proc/self/status")
	return 0
}
