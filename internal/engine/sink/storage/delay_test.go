package storage_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/bucket/buckettest"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// counts is a storage.Metrics that keeps what it is told.
type counts struct {
	mu       sync.Mutex
	reasons  map[string]int
	writes   map[string]int
	spooled  int64
	flushing int64
	active   int
	disk     int64
}

func newCounts() *counts { return &counts{reasons: map[string]int{}, writes: map[string]int{}} }

func (c *counts) FlushTask(reason string) { c.mu.Lock(); c.reasons[reason]++; c.mu.Unlock() }
func (c *counts) WriteDuration(object string, _ time.Duration) {
	c.mu.Lock()
	c.writes[object]++
	c.mu.Unlock()
}
func (c *counts) Backlog(spooled, flushing int64) {
	c.mu.Lock()
	c.spooled += spooled
	c.flushing += flushing
	c.mu.Unlock()
}
func (c *counts) ActiveTables(d int) { c.mu.Lock(); c.active += d; c.mu.Unlock() }
func (c *counts) SpoolDisk(d int64)  { c.mu.Lock(); c.disk += d; c.mu.Unlock() }
func (c *counts) Retry()             {}

func (c *counts) reason(r string) int { c.mu.Lock(); defer c.mu.Unlock(); return c.reasons[r] }

// oneRowPerTable writes one row of each of n tables, each table its own
// dispatcher, and returns a channel that gets every ack.
func oneRowPerTable(t *testing.T, s *storage.Sink, n int) <-chan error {
	t.Helper()
	g := newGen(t, gen.Config{Tables: n, Keys: 1, Rate: float64(n)})
	acked := make(chan error, n)
	for _, table := range g.TableNames() {
		writeOneRow(t, s, g, table, acked)
	}
	return acked
}

// writeOneRow writes one row of a table as its dispatcher; its ack goes
// to acked.
func writeOneRow(t *testing.T, s *storage.Sink, g *gen.Generator, table string, acked chan<- error) {
	t.Helper()
	r, err := g.Open(model.Span{Table: table}, model.TsFromMillis(start))
	if err != nil {
		t.Fatal(err)
	}
	evs := sourcetest.Read(t, r, model.TsFromMillis(start+2000), 1)
	if len(evs) != 1 {
		t.Fatalf("%s: %d rows", table, len(evs))
	}
	b := &sink.Batch{Dispatcher: table + "-p1.1", Epoch: 1, Events: evs, OnFlushed: func(err error) { acked <- err }}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// Seed 004 §4.2.1: thousands of tables with one row each, no file
// anywhere near full and the flush interval ten minutes away, are all
// acked long before it: each table's oldest row forces its flush after
// max-flush-delay. Without the delay nothing is acked (the baseline: acks
// locked to the interval).
func TestManyTablesWithOneRowAreAckedLongBeforeTheInterval(t *testing.T) {
	const tables = 5000
	m := newCounts()
	s, err := storage.OpenWith(context.Background(), "mem://?flush-interval=10m&max-flush-delay=100ms", quiet(), storage.Env{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acked := oneRowPerTable(t, s, tables)
	deadline := time.After(2 * time.Minute)
	for i := 0; i < tables; i++ {
		select {
		case err := <-acked:
			if err != nil {
				t.Fatalf("ack %d: %v", i, err)
			}
		case <-deadline:
			t.Fatalf("%d of %d tables acked within 2 minutes (the interval is 10)", i, tables)
		}
	}
	if got := m.reason(storage.ReasonDelay); got != tables {
		t.Fatalf("%d flushes counted with reason delay; want one per table (%d): %v", got, tables, m.reasons)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spooled != 0 || m.flushing != 0 || m.active != 0 || m.writes["data"] != tables || m.writes["index"] != tables {
		t.Fatalf("after every ack: spooled %d, flushing %d, active %d, writes %v; want nothing held and one data and index write per table", m.spooled, m.flushing, m.active, m.writes)
	}

	off := open(t, "mem://?flush-interval=10m&max-flush-delay=0s")
	acked = oneRowPerTable(t, off, 100)
	select {
	case <-acked:
		t.Fatal("a table was acked without the delay, its file not full and its interval not reached")
	case <-time.After(time.Second):
	}
}

// Seed 004: a slow or hung write of one table never holds back the
// others. Every request for one table's objects hangs (an S3 server,
// gofakes3, behind a gate); every other table is acked meanwhile, and
// the hung table is acked once its writes go through.
func TestASlowTableDoesNotHoldBackTheOthers(t *testing.T) {
	gate := make(chan struct{})
	var held atomic.Int64
	b := buckettest.StartObserved(t, func(r *http.Request) {
		if strings.Contains(r.URL.Path, "/t0001/") {
			held.Add(1)
			<-gate
		}
	})
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	uri := b.URI("slow", "flush-interval=10m&max-flush-delay=50ms")
	s := open(t, uri)
	const tables = 40
	g := newGen(t, gen.Config{Tables: tables, Keys: 1, Rate: tables})
	acked := make(chan error, tables)
	// The slow table first: its flush hangs before the others are
	// even written.
	writeOneRow(t, s, g, "t0001", acked)
	for deadline := time.Now().Add(time.Minute); held.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow table's flush never reached the bucket")
		}
	}
	for _, table := range g.TableNames()[1:] {
		writeOneRow(t, s, g, table, acked)
	}
	for i := 0; i < tables-1; i++ {
		select {
		case err := <-acked:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of the %d other tables acked while one table's writes hang", i, tables-1)
		}
	}
	select {
	case <-acked:
		t.Fatal("the hung table was acked before its writes went through")
	default:
	}
	close(gate)
	select {
	case err := <-acked:
		if err != nil {
			t.Fatalf("the slow table, once its writes went through: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the slow table was never acked")
	}
}

// s3Recorder is gofakes3 behind a recorder of the requests it serves.
type s3Recorder struct {
	mu   sync.Mutex
	seen []string // "METHOD path"
}

func (r *s3Recorder) count(method, suffix string) (n int, paths []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen {
		if strings.HasPrefix(s, method+" ") && strings.HasSuffix(s, suffix) {
			n++
			paths = append(paths, strings.TrimPrefix(s, method+" "))
		}
	}
	return n, paths
}

func startRecordedS3(t testing.TB) (*s3Recorder, string) {
	t.Helper()
	rec := &s3Recorder{}
	b := buckettest.StartObserved(t, func(r *http.Request) {
		rec.mu.Lock()
		rec.seen = append(rec.seen, r.Method+" "+r.URL.Path)
		rec.mu.Unlock()
	})
	return rec, b.URI("ttl", "")
}

// Seed 004 §4.3.2: a partition's file numbering is forgotten after
// state-ttl unused, and its next file reads the numbering back from the
// index in the bucket: it neither reuses nor goes back on an index.
// While remembered, no index is read.
func TestAfterTheStateTTLTheFileNumberingIsReadBack(t *testing.T) {
	rec, base := startRecordedS3(t)
	s := open(t, base+"&flush-interval=10m&max-flush-delay=20ms&state-ttl=300ms")
	g := newGen(t, gen.Config{Tables: 1, Keys: 50, Rate: 50})
	r, err := g.Open(model.Span{Table: "t0001"}, model.TsFromMillis(start))
	if err != nil {
		t.Fatal(err)
	}
	writeAndWait := func() {
		t.Helper()
		evs := sourcetest.Read(t, r, model.TsFromMillis(start+60_000), 1)
		acked := make(chan error, 1)
		if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "t0001-p1.1", Epoch: 1, Events: evs, OnFlushed: func(err error) { acked <- err }}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-acked:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("not acked")
		}
	}
	writeAndWait()
	writeAndWait()
	if n, _ := rec.count("GET", ".index"); n != 1 {
		t.Fatalf("%d index reads for two files in a row; want 1 (the first file's, then remembered)", n)
	}
	time.Sleep(time.Second) // past the TTL and a sweep
	writeAndWait()
	if n, _ := rec.count("GET", ".index"); n != 2 {
		t.Fatalf("%d index reads; want 2: the numbering forgotten after state-ttl is read back", n)
	}
	_, puts := rec.count("PUT", ".json")
	var data []string
	for _, p := range puts {
		if strings.Contains(p, "/CDC_") {
			data = append(data, p[strings.LastIndex(p, "/")+1:])
		}
	}
	want := []string{"CDC_t0001-p1.1_000001.json", "CDC_t0001-p1.1_000002.json", "CDC_t0001-p1.1_000003.json"}
	if strings.Join(data, " ") != strings.Join(want, " ") {
		t.Fatalf("data files written %v; want %v (never reused, never back)", data, want)
	}
}

// The DDL barrier's flush is counted as reason "ddl", any other Flush as
// "forced", so an operator sees how many small files DDLs cost.
func TestTheDDLBarriersFlushIsCountedApart(t *testing.T) {
	m := newCounts()
	s, err := storage.OpenWith(context.Background(), "mem://?flush-interval=10m&max-flush-delay=0s", quiet(), storage.Env{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := newGen(t, gen.Config{Tables: 2, Keys: 1, Rate: 2})
	acked := make(chan error, 2)
	writeOneRow(t, s, g, "t0001", acked)
	writeOneRow(t, s, g, "t0002", acked)
	ctx := context.Background()
	if err := sink.FlushForDDL(ctx, s, "t0001-p1.1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, "t0002-p1.1"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-acked; err != nil {
			t.Fatal(err)
		}
	}
	if m.reason(storage.ReasonDDL) != 1 || m.reason(storage.ReasonForced) != 1 {
		t.Fatalf("flush reasons %v; want one ddl and one forced", m.reasons)
	}
}
