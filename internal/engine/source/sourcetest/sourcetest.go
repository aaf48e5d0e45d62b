// Package sourcetest helps tests read sources: a read that fails fails
// the test; spans copied as dispatchers copy them.
package sourcetest

import (
	"context"
	"math"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Read is r.Read with a background context; an error fails the test.
func Read(tb testing.TB, r source.Reader, upTo model.Ts, max int) []source.Event {
	tb.Helper()
	evs, err := r.Read(context.Background(), upTo, max)
	if err != nil {
		tb.Fatalf("read up to %d: %v", upTo, err)
	}
	return evs
}

// CopySpans reads each span as a dispatcher does, one goroutine a span,
// from a Copier's readers opened at from with nothing copied, until
// every span's copy is done, and returns the rows each read (benchmarks
// of a database's snapshot, which count and keep nothing). A table
// without schema changes during the copy is assumed: a reader that stops
// before one would never finish.
func CopySpans(tb testing.TB, c source.Copier, from model.Ts, spans []model.Span) []int {
	tb.Helper()
	counts := make([]int, len(spans))
	errs := make(chan error, len(spans))
	for i, span := range spans {
		r, err := c.OpenCopying(span, from, model.CopyProgress{})
		if err != nil {
			tb.Fatal(err)
		}
		go func() {
			if cl, ok := r.(source.Closer); ok {
				defer cl.Close()
			}
			for {
				evs, err := r.Read(context.Background(), model.Ts(math.MaxInt64>>1), 256)
				if err != nil {
					errs <- err
					return
				}
				counts[i] += len(evs)
				if cp, ok := r.(source.Copying); ok && cp.Copied().Done {
					errs <- nil
					return
				}
				if len(evs) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	for range spans {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
	return counts
}

// IntSpans cuts table, whose int8 key runs 1..rows, into parts spans of
// equal key ranges, the first and last open.
func IntSpans(table string, rows, parts int) []model.Span {
	var spans []model.Span
	for k := 0; k < parts; k++ {
		span := model.Span{Table: table, Key: "int8"}
		if k > 0 {
			span.Start, _ = model.EncodeKey("int8", strconv.Itoa(k*rows/parts+1))
		}
		if k < parts-1 {
			span.End, _ = model.EncodeKey("int8", strconv.Itoa((k+1)*rows/parts+1))
		}
		spans = append(spans, span)
	}
	return spans
}

// ReportCopies reports a snapshot benchmark's figures: rows/s copied by
// one partition and by four, the baseline's rows/s (its metric named
// baseline+"-rows/s") and the two ratios to it.
func ReportCopies(b *testing.B, rows int, one, four, base time.Duration, baseline string) {
	n := float64(rows)
	b.ReportMetric(n/one.Seconds(), "rows/s-1-partition")
	b.ReportMetric(n/four.Seconds(), "rows/s-4-partitions")
	b.ReportMetric(n/base.Seconds(), baseline+"-rows/s")
	b.ReportMetric(base.Seconds()/one.Seconds(), "ratio-1")
	b.ReportMetric(base.Seconds()/four.Seconds(), "ratio-4")
}

// ChunkedSpans reads a table cut at bounds (their text; "" is open) into
// spans of key types keyTypes, each span chunk by chunk until a chunk is
// not full, as a partition copies it; read reads one chunk of a span
// after what is copied, and at is told each chunk's number first (a
// test's chance to look at its query). It fails the test unless every
// span's rows come in ascending order of their first column's text,
// inside the span, and returns how often each key was read.
func ChunkedSpans(tb testing.TB, table, keyTypes string, bounds []string, at func(span model.Span, copied model.CopyProgress, chunk int),
	read func(span model.Span, copied model.CopyProgress) *source.Chunk) map[string]int {
	tb.Helper()
	enc := func(v string) string {
		if v == "" {
			return ""
		}
		k, err := model.EncodeKeyValues(keyTypes, []string{v})
		if err != nil {
			tb.Fatal(err)
		}
		return k
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(bounds); i++ {
		span := model.Span{Table: table, Key: keyTypes, Start: enc(bounds[i]), End: enc(bounds[i+1])}
		var copied model.CopyProgress
		prev := ""
		for chunk := 0; ; chunk++ {
			at(span, copied, chunk)
			c := read(span, copied)
			for _, e := range c.Rows {
				id := e.New[0].Text
				if id <= prev || id < bounds[i] || (bounds[i+1] != "" && id >= bounds[i+1]) {
					tb.Fatalf("span [%q, %q) read %q after %q", bounds[i], bounds[i+1], id, prev)
				}
				prev = id
				seen[id]++
			}
			if !c.Full { // the range ends with it
				break
			}
			copied = c.Through(copied)
		}
	}
	return seen
}

// CopyWhileWriting reads a span chunk by chunk until a chunk is not
// full, as a partition copies it, calling write once its first chunk is
// read (the rows written then are after the copy began: the stream's),
// and returns the keys read (encoded) and the copy's horizon. It fails
// the test unless each key is read once and inside the span, and, where
// the chunks are read in byte order (not the source's index order:
// Chunk.Ordered), in ascending order and at or before the horizon.
func CopyWhileWriting(tb testing.TB, span model.Span, write func(), read func(span model.Span, copied model.CopyProgress) *source.Chunk) (keys []string, horizon string) {
	tb.Helper()
	var copied model.CopyProgress
	seen, ordered := map[string]bool{}, false
	for chunk := 0; ; chunk++ {
		c := read(span, copied)
		ordered = ordered || c.Ordered
		for _, e := range c.Rows {
			if n := len(keys); seen[e.Key] || !span.Contains(e.Key) || !ordered && n > 0 && e.Key <= keys[n-1] {
				tb.Fatalf("chunk %d read key %q twice, out of order or outside its span", chunk, model.DecodeKey(span.Key, e.Key))
			}
			seen[e.Key] = true
			keys = append(keys, e.Key)
		}
		if chunk == 0 {
			horizon = c.Horizon
			write()
		}
		if !c.Full {
			break
		}
		copied = c.Through(copied)
		if copied.Horizon != horizon {
			tb.Fatalf("chunk %d: the copy's horizon is %q, its first chunk's %q", chunk, copied.Horizon, horizon)
		}
	}
	if n := len(keys); !ordered && n > 0 && horizon != "" && keys[n-1] > horizon {
		tb.Fatalf("the copy read %q, after its horizon %q", model.DecodeKey(span.Key, keys[n-1]), model.DecodeKey(span.Key, horizon))
	}
	return keys, horizon
}

// ProcessCPU is the CPU time this process has used, user and system:
// benchmarks report a side's CPU a row beside its rows/s, which a busy
// neighbour on the machine disturbs less than the wall clock.
func ProcessCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
