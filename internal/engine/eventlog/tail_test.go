package eventlog

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// TestALogReadsTheSameWhateverItKeepsInMemory drives logs that keep
// nothing in memory, a few rows, and every row through the same random
// appends (whole transactions and parts, some erased, some cut back by a
// rollback to a savepoint), resolves and trims, two of them sharing a
// small room, and has partitions of each read them back: every read must return the
// same events and cursor from each, and what memory holds must go back to
// nothing once everything is trimmed.
func TestALogReadsTheSameWhateverItKeepsInMemory(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			txns := seed%2 == 0
			small := NewMemory(int64(rng.IntN(6000) + 500))
			// The last shares the small room with the second: each spills
			// the other's rows to make room for its own.
			rooms := []*Memory{nil, small, NewMemory(1 << 30), small}
			logs := make([]*Log, len(rooms))
			for i, m := range rooms {
				l, err := Open(t.TempDir(), 0, Options{Transactions: txns, Memory: m})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				logs[i] = l
			}
			each := func(what string, f func(l *Log) error) {
				t.Helper()
				for i, l := range logs {
					if err := f(l); err != nil {
						t.Fatalf("log %d: %s: %v", i, what, err)
					}
				}
			}
			tables := []string{"public.a", "public.b", "public.c", "public.d", "public.e", "public.f", "public.g", "public.h"}
			spans := []model.Span{{Table: "public.a", End: "k"}, {Table: "public.a", Start: "k"}, {Table: "public.c", End: "m"}, {Table: "public.c", Start: "m"}}
			for _, table := range tables[3:] {
				spans = append(spans, model.Span{Table: table})
			}
			spans = append(spans, model.Span{Table: "public.b"})
			cursors := make([][]source.Cursor, len(logs))
			for i := range cursors {
				cursors[i] = make([]source.Cursor, len(spans))
			}
			rowOf := func(ts model.Ts, n int) source.Event {
				key := fmt.Sprintf("%c%d", 'a'+rng.IntN(26), rng.IntN(50))
				e := source.Event{Kind: source.KindDML, Table: tables[rng.IntN(len(tables))], CommitTs: ts, Def: v1, Op: source.OpInsert, Key: key,
					New: []source.Value{source.Text(key), source.Text(fmt.Sprint(n))}}
				if rng.IntN(4) == 0 {
					e.Op, e.Old = source.OpUpdate, []source.Value{source.Text(key), {Unchanged: true}}
				}
				return e
			}
			var ts, trimmed model.Ts
			n := 0
			readAll := func() {
				t.Helper()
				max := 1 + rng.IntN(6)
				for s, span := range spans {
					var want []source.Event
					var wantCur source.Cursor
					for i, l := range logs {
						evs, cur, err := l.Read(span, cursors[i][s], ts+5, max)
						if err != nil {
							t.Fatalf("log %d: read %v from %+v: %v", i, span, cursors[i][s], err)
						}
						if i == 0 {
							want, wantCur = evs, cur
						} else if !reflect.DeepEqual(evs, want) || cur != wantCur {
							t.Fatalf("log %d (room %v) read %v from %+v:\n%+v %+v\nthe store alone:\n%+v %+v", i, rooms[i], span, cursors[i][s], evs, cur, want, wantCur)
						}
						cursors[i][s] = cur
					}
				}
			}
			var open model.Ts // a transaction received in parts, not committed yet
			parted := 0       // its rows so far, as the log numbers them
			for step := 0; step < 400; step++ {
				switch r := rng.IntN(13); {
				case r < 3: // rows of a transaction still being received
					if open == 0 {
						ts += model.Ts(1 + rng.IntN(3))
						open, parted = ts, 0
					}
					part := []source.Event{}
					for range 1 + rng.IntN(8) {
						n++
						part = append(part, rowOf(open, n))
					}
					parted += len(part)
					each("append a part", func(l *Log) error { return l.AppendPart(part) })
				case r < 4 && open != 0:
					table := tables[rng.IntN(len(tables))]
					each("erase a part", func(l *Log) error { return l.ErasePart(table) })
				case r == 12 && open != 0: // a rollback to a savepoint
					keep := rng.IntN(parted + 1)
					parted = keep
					each("truncate the parts", func(l *Log) error { return l.TruncatePart(keep) })
				case r < 7: // a commit: the open transaction's, or a whole one
					if open == 0 {
						ts += model.Ts(1 + rng.IntN(3))
					}
					var rest []source.Event
					for range rng.IntN(6) {
						n++
						rest = append(rest, rowOf(ts, n))
					}
					if rng.IntN(4) == 0 && len(rest) > 0 {
						rest = append(rest, source.Event{Kind: source.KindTxn, CommitTs: ts, Txn: &source.TxnSummary{SourceID: fmt.Sprint("x", uint64(ts))}})
					}
					if len(rest) == 0 {
						each("resolve", func(l *Log) error { l.Resolve(ts); return nil })
					} else {
						each("append", func(l *Log) error { return l.Append(rest) })
					}
					open = 0
				case r < 10:
					readAll()
				default: // the checkpoint: below every partition's cursor
					low := ts
					for _, c := range cursors[0] {
						low = min(low, c.Done)
					}
					if low > trimmed && rng.IntN(2) == 0 {
						trimmed = low
						each("trim", func(l *Log) error { return l.Trim(low) })
					}
				}
			}
			readAll()
			ts++
			each("resolve", func(l *Log) error { l.Resolve(ts); return nil })
			each("trim", func(l *Log) error { return l.Trim(ts) })
			for i, m := range rooms {
				if m != nil && m.Used() != 0 {
					t.Fatalf("log %d: memory holds %d bytes once everything is trimmed", i, m.Used())
				}
				if len(logs[i].tail.tables) != 0 {
					t.Fatalf("log %d: memory still has tables %v once everything is trimmed", i, logs[i].tail.tables)
				}
			}
		})
	}
}

// TestALogsRowsAreKeptInMemoryWithinItsRoom checks what the room bounds:
// a log keeps its newest rows up to the node's room, at most half of it
// when it holds them alone, gives them back as they are trimmed, and all
// of them when closed.
func TestALogsRowsAreKeptInMemoryWithinItsRoom(t *testing.T) {
	m := NewMemory(64 << 10)
	l, err := Open(t.TempDir(), 0, Options{Memory: m})
	if err != nil {
		t.Fatal(err)
	}
	for ts := model.Ts(1); ts <= 2000; ts++ {
		if err := l.Append([]source.Event{row(ts, fmt.Sprint("k", uint64(ts)), source.OpInsert, v1)}); err != nil {
			t.Fatal(err)
		}
		if used := m.Used(); used > 32<<10 {
			t.Fatalf("at %v the log keeps %d bytes, more than half its room", ts, used)
		}
	}
	if used := m.Used(); used < 16<<10 {
		t.Fatalf("the log keeps %d bytes of its newest rows; want close to half its room", used)
	}
	evs, _, err := l.Read(model.Span{Table: "public.t"}, after(0), 2000, 5000)
	if err != nil || len(evs) != 2000 || evs[0].Key != "k1" || evs[1999].Key != "k2000" {
		t.Fatalf("read %d rows (%v); want every one, from the store and from memory", len(evs), err)
	}
	if err := l.Trim(1990); err != nil {
		t.Fatal(err)
	}
	if used := m.Used(); used > 4<<10 {
		t.Fatalf("after the trim the log keeps %d bytes; want ten rows'", used)
	}
	l.Close()
	if used := m.Used(); used != 0 {
		t.Fatalf("a closed log keeps %d bytes", used)
	}
}

// TestATransactionInPartsIsNotKeptInMemory checks that a large
// transaction's parts go to the store as they come (parts exist so that
// it costs disk, not memory), the table's older rows before them, and
// that the transaction reads whole, in its order, after its commit.
func TestATransactionInPartsIsNotKeptInMemory(t *testing.T) {
	m := NewMemory(64 << 20)
	l, err := Open(t.TempDir(), 0, Options{Memory: m, Transactions: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append([]source.Event{row(5, "old", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	if m.Used() == 0 {
		t.Fatal("a committed row is not kept in memory")
	}
	for i := range 50 {
		if err := l.AppendPart([]source.Event{row(10, fmt.Sprint("p", i), source.OpInsert, v1)}); err != nil {
			t.Fatal(err)
		}
		if used := m.Used(); used != 0 {
			t.Fatalf("after part %d memory keeps %d bytes; want the parts and the table's older rows in the store", i, used)
		}
	}
	if err := l.Append([]source.Event{row(10, "last", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	evs, _, err := l.Read(model.Span{Table: "public.t"}, after(0), 10, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 54 || evs[0].Key != "old" || evs[1].Kind != source.KindTxn || evs[2].Key != "p0" || evs[51].Key != "p49" || evs[52].Key != "last" || evs[53].Kind != source.KindTxn || evs[53].Txn.Events != 51 {
		t.Fatalf("read %d events: %s; want old and its summary, the 50 parts, last, and the transaction's summary of 51 rows", len(evs), keys(evs))
	}
	for i, e := range evs[2:53] {
		if e.TxnOrder != uint32(i+1) {
			t.Fatalf("row %s is number %d of its transaction, want %d", e.Key, e.TxnOrder, i+1)
		}
	}
}

// TestALogsRunsDoNotGrowWhileItsRowsAreTrimmed checks that what a log
// remembers of its rows' order stays bounded while rows are appended and
// trimmed for as long as it lives (nothing spilled: the room is large).
func TestALogsRunsDoNotGrowWhileItsRowsAreTrimmed(t *testing.T) {
	l, err := Open(t.TempDir(), 0, Options{Memory: NewMemory(64 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for ts := model.Ts(1); ts <= 20_000; ts++ {
		e := row(ts, "k", source.OpInsert, v1)
		e.Table = fmt.Sprint("public.t", uint64(ts)%7) // runs of one row each
		if err := l.Append([]source.Event{e}); err != nil {
			t.Fatal(err)
		}
		if ts%100 == 0 {
			if err := l.Trim(ts - 10); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(l.tail.runs); n > 2100 {
		t.Fatalf("the log remembers %d runs of 20,000 rows appended and trimmed; want them let go", n)
	}
}

// TestTheLogHoldingTheOldestRowsGivesUpItsRoom checks how logs share a
// room: two changefeeds whose sinks stopped (their rows neither read nor
// trimmed) and one that moves. When the moving one's rows find the room
// full, the log holding the oldest rows writes them to its files; the
// moving one keeps its newest in memory, and nothing is lost.
func TestTheLogHoldingTheOldestRowsGivesUpItsRoom(t *testing.T) {
	m := NewMemory(64 << 10)
	open := func() *Log {
		l, err := Open(t.TempDir(), 0, Options{Memory: m})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	stalledA, stalledB, moving := open(), open(), open()
	fill := func(l *Log, from, n model.Ts) {
		for ts := from; ts < from+n; ts++ {
			if err := l.Append([]source.Event{row(ts, fmt.Sprint("k", uint64(ts)), source.OpInsert, v1)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill(stalledA, 1, 100)
	fill(stalledB, 101, 100)
	keptB := stalledB.tail.held.Load()
	if stalledA.tail.held.Load() == 0 || keptB == 0 || m.Used() > 64<<10 {
		t.Fatalf("the stalled logs keep %d and %d bytes, the room %d of %d", stalledA.tail.held.Load(), keptB, m.Used(), 64<<10)
	}
	fill(moving, 201, 60)
	if used := m.Used(); used > 64<<10 {
		t.Fatalf("the logs keep %d bytes, over their room of %d", used, 64<<10)
	}
	if a := stalledA.tail.held.Load(); a != 0 {
		t.Fatalf("the log with the oldest rows still keeps %d bytes", a)
	}
	if b := stalledB.tail.held.Load(); b != keptB {
		t.Fatalf("the second stalled log keeps %d bytes, had %d; the oldest log's rows were enough", b, keptB)
	}
	if c := moving.tail.held.Load(); c == 0 {
		t.Fatal("the moving log's newest rows were written to its files")
	}
	evs, _, err := stalledA.Read(model.Span{Table: "public.t"}, after(0), 1000, 1000)
	if err != nil || len(evs) != 100 || evs[99].Key != "k100" {
		t.Fatalf("the spilled log reads %d rows (%v); want its 100", len(evs), err)
	}
}

// TestABusyLogIsPassedOverForTheNextOldest checks that filling the room
// never waits for a log another goroutine holds (a partition reading it):
// the next oldest log gives up its rows instead.
func TestABusyLogIsPassedOverForTheNextOldest(t *testing.T) {
	m := NewMemory(64 << 10)
	var logs []*Log
	for range 3 {
		l, err := Open(t.TempDir(), 0, Options{Memory: m})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		logs = append(logs, l)
	}
	for i, l := range logs {
		n := model.Ts(100)
		if i == 2 {
			n = 80 // the room is full
		}
		for ts := model.Ts(i*100 + 1); ts <= model.Ts(i*100)+n; ts++ {
			if i == 2 && ts == 201 {
				logs[0].mu.RLock() // a reader of the oldest log, in the middle of a read
			}
			if err := l.Append([]source.Event{row(ts, "k", source.OpInsert, v1)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	logs[0].mu.RUnlock()
	if a, b := logs[0].tail.held.Load(), logs[1].tail.held.Load(); a == 0 || b != 0 {
		t.Fatalf("the busy oldest log keeps %d bytes and the next oldest %d; want the busy one passed over and the next one spilled", a, b)
	}
	if used := m.Used(); used > 64<<10 {
		t.Fatalf("the logs keep %d bytes, over their room", used)
	}
}

// TestAppendKeepsNoReferenceToItsSlice checks the LogWriter contract a
// source relies on when it reuses its array of events for the next
// transaction: what a log returns does not change when the appended
// slice's elements are overwritten afterwards, kept in memory or not.
func TestAppendKeepsNoReferenceToItsSlice(t *testing.T) {
	for _, m := range []*Memory{nil, NewMemory(64 << 20)} {
		l, err := Open(t.TempDir(), 0, Options{Memory: m, Transactions: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		evs := []source.Event{row(5, "a", source.OpInsert, v1), row(5, "b", source.OpInsert, v1)}
		if err := l.Append(evs); err != nil {
			t.Fatal(err)
		}
		clear(evs)
		evs = append(evs[:0], row(6, "x", source.OpDelete, v1))
		if err := l.Append(evs); err != nil {
			t.Fatal(err)
		}
		got, _, err := l.Read(model.Span{Table: "public.t"}, after(0), 10, 100)
		if err != nil {
			t.Fatal(err)
		}
		if keys(got) != "a@5 b@5 a@5 x@6 x@6 " || got[0].Op != source.OpInsert || got[3].Op != source.OpDelete {
			t.Fatalf("room %v: read %s", m, keys(got))
		}
	}
}
