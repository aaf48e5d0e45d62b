package postgres

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// BenchmarkReaderAgainstBareDecode measures the changefeed reader's own
// cost per row, without the network: pgoutput messages as the walsender
// sends them (a transaction of 1,000 inserts of BenchmarkSourceAgainstBareReader's
// rows) decoded by the stream into typed rows with their routing keys,
// and, as "reader", also appended to an event log on disk as the reader
// does. The baseline, in the same run on the same bytes, is pglogrepl's
// parse of each message, what the bare reader does. Over a socket the
// walsender's pace and the machine's cost of waking a reader decide the
// rows/s (BenchmarkSourceAgainstBareReader); this is the CPU of ours
// that stands beside it.
//
//	go test -run '^$' -bench ReaderAgainstBareDecode -benchmem ./internal/engine/source/postgres
func BenchmarkReaderAgainstBareDecode(b *testing.B) {
	const rows = 1000
	msgs := benchTransaction(rows)
	def := &source.TableDef{Schema: "public", Name: "bench", Columns: []source.ColumnDef{
		{Name: "id", Type: "int8", KeyPos: 1}, {Name: "v", Type: "text", Nullable: true}, {Name: "n", Type: "numeric(12,2)", Nullable: true},
		{Name: "at", Type: "timestamptz", Nullable: true}, {Name: "flag", Type: "bool", Nullable: true}}}
	newStream := func() *Stream {
		return &Stream{
			tables:       map[string]*TableState{"public.bench": {Def: def}},
			rels:         map[uint32]*relation{7: {table: "public.bench"}},
			partedTables: map[string]bool{},
		}
	}
	decode := func(s *Stream, each func(Item)) {
		for _, m := range msgs {
			it, ok, err := s.handle(b.Context(), m)
			if err != nil {
				b.Fatal(err)
			}
			if ok {
				each(it)
			}
		}
	}
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		s := newStream()
		for b.Loop() {
			decode(s, func(Item) {})
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	})
	b.Run("reader", func(b *testing.B) {
		b.ReportAllocs()
		log, err := eventlog.Open(b.TempDir(), 0, eventlog.Options{Memory: eventlog.NewMemory(eventlog.DefaultMemory)})
		if err != nil {
			b.Fatal(err)
		}
		defer log.Close()
		s := newStream()
		for b.Loop() {
			decode(s, func(it Item) {
				if it.Txn == nil {
					return
				}
				if err := log.Append(it.Txn.Events); err != nil {
					b.Fatal(err)
				}
				_ = log.Trim(it.Txn.Ts) // the checkpoint follows: the log stays small
			})
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	})
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for _, m := range msgs {
				if bareInsert(b, m) {
					n++
				}
			}
			if n != rows {
				b.Fatalf("%d inserts", n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	})
}

// benchTransaction is one transaction's XLogData messages: Begin, rows
// inserts of (id, md5 text, numeric, timestamptz, bool), Commit.
func benchTransaction(rows int) [][]byte {
	xlog := func(wal []byte) []byte {
		b := append([]byte{pglogrepl.XLogDataByteID}, make([]byte, 24)...)
		return append(b, wal...)
	}
	pgTime := func(t time.Time) uint64 {
		return uint64(t.Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds())
	}
	at := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	begin := []byte{'B'}
	begin = binary.BigEndian.AppendUint64(begin, 0x1000)
	begin = binary.BigEndian.AppendUint64(begin, pgTime(at))
	begin = binary.BigEndian.AppendUint32(begin, 42)
	msgs := [][]byte{xlog(begin)}
	for i := 1; i <= rows; i++ {
		id, v, n, ts, flag := fmt.Sprint(i), fmt.Sprintf("%032x", i*7919), fmt.Sprintf("%.2f", float64(i)/7), "2026-12-01 06:00:00.123456+00", "t"
		msgs = append(msgs, xlog(rowMessageBytes('I', 7, 0, nil, []*string{&id, &v, &n, &ts, &flag})))
	}
	commit := []byte{'C', 0}
	commit = binary.BigEndian.AppendUint64(commit, 0x2000)
	commit = binary.BigEndian.AppendUint64(commit, 0x2010)
	commit = binary.BigEndian.AppendUint64(commit, pgTime(at))
	return append(msgs, xlog(commit))
}
