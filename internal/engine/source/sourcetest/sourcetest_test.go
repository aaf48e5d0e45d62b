package sourcetest

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// fatal is a testing.TB whose Fatalf records what failed and ends the
// goroutine, as the testing package's does, without failing the test
// that uses it.
type fatal struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatal) Helper() {}

func (f *fatal) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run runs fn on a goroutine of its own and returns what it failed with.
func (f *fatal) run(fn func()) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

// keyChunks reads the chunks of spans of keys (text, in order) as a
// database would: the next at most limit keys of the span after what is
// copied, full when it read as many as it asked. skip leaves a key out of
// every read; swap returns a chunk's first two rows the other way round.
func keyChunks(t *testing.T, keys []string, limit int, skip string, swap bool) func(span model.Span, copied model.CopyProgress) *source.Chunk {
	def := &source.TableDef{Columns: []source.ColumnDef{{Name: "id", Type: "text", KeyPos: 1}}}
	return func(span model.Span, copied model.CopyProgress) *source.Chunk {
		c := source.NewChunk(span.Table, def, limit)
		after, started := copied.After()
		for _, k := range keys {
			enc, err := model.EncodeKeyValues("text", []string{k})
			if err != nil {
				t.Fatal(err)
			}
			if k == skip || started && enc <= after || !span.Contains(enc) {
				continue
			}
			if len(c.Rows) == limit {
				break
			}
			if err := c.AddRow([][]byte{[]byte(k)}, []int{0}, "text"); err != nil {
				t.Fatal(err)
			}
		}
		if swap && len(c.Rows) > 1 {
			c.Rows[0], c.Rows[1] = c.Rows[1], c.Rows[0]
		}
		c.Loaded()
		return c
	}
}

// ChunkedSpans reads every span chunk by chunk until a chunk is not full,
// and counts each key once; it fails a test whose reads leave a row out
// of order or outside its span.
func TestChunkedSpansReadEachSpanToItsEndInOrder(t *testing.T) {
	var keys []string
	for i := range 50 {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	bounds := []string{"", "k10", "k33", ""}
	var chunks []int
	seen := ChunkedSpans(t, "t", "text", bounds, func(_ model.Span, _ model.CopyProgress, chunk int) { chunks = append(chunks, chunk) },
		keyChunks(t, keys, 7, "", false))
	if len(seen) != len(keys) {
		t.Fatalf("read %d keys of %d", len(seen), len(keys))
	}
	for _, k := range keys {
		if seen[k] != 1 {
			t.Fatalf("key %s read %d times", k, seen[k])
		}
	}
	// Spans of 10, 23 and 17 keys in chunks of 7: 2, 4 and 3 chunks (the
	// last of each not full: 3, 2 and 3 rows).
	if want := []int{0, 1, 0, 1, 2, 3, 0, 1, 2}; !slices.Equal(chunks, want) {
		t.Fatalf("chunks read %v, want %v", chunks, want)
	}

	f := &fatal{TB: t}
	if msg := f.run(func() {
		ChunkedSpans(f, "t", "text", bounds, func(model.Span, model.CopyProgress, int) {}, keyChunks(t, keys, 7, "", true))
	}); !strings.Contains(msg, "read \"k00\" after \"k01\"") {
		t.Fatalf("rows out of order: ChunkedSpans said %q", msg)
	}
	// A key left out is not ChunkedSpans' to find: it returns what was
	// read, and the caller compares it with the table.
	f = &fatal{TB: t}
	var missing map[string]int
	if msg := f.run(func() {
		missing = ChunkedSpans(f, "t", "text", bounds, func(model.Span, model.CopyProgress, int) {}, keyChunks(t, keys, 7, "k20", false))
	}); msg != "" || len(missing) != len(keys)-1 || missing["k20"] != 0 {
		t.Fatalf("a key left out: failed %q, read %d keys (k20 %d times)", msg, len(missing), missing["k20"])
	}
}
