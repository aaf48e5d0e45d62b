package source

// A copying reader at its chunks' watermarks: a low one opens a chunk's
// window, a high one ends it, and the chunk's rows the stream did not
// change go out (chunk.go, leftout.go).

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// onMark handles a watermark; only this reader's chunks' count.
func (r *CopyReader) onMark(e *Event) {
	var mk Mark
	if json.Unmarshal([]byte(e.Statement), &mk) != nil {
		return
	}
	if mk.Kind == MarkAttached {
		// A relation joined the table with rows the stream never carried
		// (a partition attached with rows already in it): the span copies
		// its rows too, once what it copies now is copied. A table without
		// a key copies whole, from one snapshot: its source does not ask.
		if !r.keyless {
			for _, rel := range strings.Fields(mk.ID) {
				// The relation the span copies now, attached again, is
				// copied once more after this pass (Attached).
				r.copied = r.copied.Attached(rel, e.CommitTs)
			}
		}
		return
	}
	if mk.Kind == MarkAgain {
		if !r.keyless {
			r.copied = r.copied.CopyAgain(mk.ID, mk.At)
		}
		return
	}
	i := 0
	for i < len(r.chunks) && r.chunks[i].ID != mk.ID {
		i++
	}
	if i == len(r.chunks) {
		return // another partition's chunk, or an earlier run's
	}
	c := r.chunks[i]
	if mk.Kind == "low" {
		c.open, c.lowAt = true, e.CommitTs
		return
	}
	if i != 0 {
		// Watermarks come in the order they were written, one chunk after
		// the other: an older chunk's high watermark went missing.
		r.failed(fmt.Errorf("the high watermark of a chunk of %s came before an older chunk's", c.Table))
		return
	}
	r.chunks = r.chunks[1:]
	r.release(c)
	want := r.unsent(c, mk.Racy) // before dropUnseen forgets rows
	if !c.loaded {
		r.failed(fmt.Errorf("the high watermark of a chunk of %s came before its rows were read", c.Table))
		return
	}
	if mk.Unsure || !r.dropUnseen(c, mk.Racy) {
		r.failed(fmt.Errorf("a chunk of %s cannot tell which changes before its low watermark its read saw; reading it again", c.Table))
		return
	}
	if c.stale {
		// The table's schema changed between the read and the high
		// watermark: the rows' columns are not the stream's there. The
		// chunks after it were read after its rows: read them again too.
		r.failed(fmt.Errorf("the schema of %s changed while a chunk was read; reading it again", c.Table))
		return
	}
	if key := r.span.CopyKey(r.copied); key != "" && c.KeyCols != "" && c.KeyCols != key {
		// Read under a key moved to other columns since the copy began,
		// or since the span was cut (a database source refuses such a
		// read before it; this is where every source's copy is held to
		// it).
		r.failed(fmt.Errorf("%s", KeyMovedWhileCopying(c.Table, key, c.KeyCols)))
		return
	}
	if !SameColumns(c.Def, e.Def) && !c.projectOnto(e.Def) {
		// The catalog is ahead of the stream (PostgreSQL describes a
		// table's new columns only with its next row). Added columns are
		// left out (the stream's schema change, when it comes, gives
		// them to the rows before it); any other change waits for that
		// row.
		r.failed(fmt.Errorf("the columns of %s in the catalog (%s) are not those of the stream (%s) yet; reading the chunk again", c.Table, ColumnNames(c.Def), ColumnNames(e.Def)))
		return
	}
	fills := c.fills(e, want)
	rows := c.emit(e)
	next := r.copied
	next.Rows += int64(len(rows))
	if next.Key == "" {
		next.Key = c.KeyCols
	}
	rows = append(rows, fills...)
	if c.Full {
		next = c.Through(next)
	} else {
		next = next.Finished()
	}
	if r.keyless {
		// One snapshot: the rest of the table goes out at this position
		// too, fetched as the rows before it have gone.
		next.To = ""
		if c.Full && r.whole != nil {
			r.emitting, r.wholeAt = true, *e
		} else if r.whole != nil {
			r.whole.Close()
			r.whole = nil
		}
	}
	r.fails = 0
	r.sizeAfter(c)
	r.out, r.outAt, r.next = rows, e.CommitTs, next
	if len(rows) == 0 && !r.isEmitting() {
		r.out, r.copied = nil, next
	}
}

// dropUnseen drops from the chunk the keys of rows at the positions
// given (transactions before its low watermark its read did not see)
// and forgets the rows no chunk in flight needs; false when a position
// is before what the reader remembers. r.mu is held; c is out of
// r.chunks.
func (r *CopyReader) dropUnseen(c *Chunk, racy []model.Ts) bool {
	ok := true
	for _, ts := range racy {
		if ts <= r.seenFrom {
			ok = false
			continue
		}
		for _, s := range r.seen {
			if s.ts == ts {
				c.dropped[s.key] = true
			}
		}
	}
	if len(r.chunks) > 0 {
		from := r.chunks[0].regAt
		for _, o := range r.chunks[1:] {
			from = min(from, o.regAt)
		}
		if from > r.seenFrom {
			i := 0
			for i < len(r.seen) && r.seen[i].ts <= from {
				i++
			}
			r.seen, r.seenFrom = append(r.seen[:0], r.seen[i:]...), from
		}
	}
	return ok
}

// failed gives up the chunk in flight and waits a while before the next
// (growing with failures in a row); a table without a key starts its copy
// over. It warns at most every half minute.
func (r *CopyReader) failed(err error) {
	r.fails++
	r.retryAt = time.Now().Add(min(time.Duration(1<<min(r.fails-1, 5))*time.Second, 30*time.Second))
	// The chunks in flight go on from one another: all are read again.
	// A fetch still running drops its chunk when it ends.
	for _, c := range r.chunks {
		r.release(c)
	}
	r.chunks = nil
	if r.whole != nil {
		// Closed beside the reader (it may wait on the network), but
		// owned by it: Close waits.
		whole := r.whole
		r.fetches.Add(1)
		go func() {
			defer r.fetches.Done()
			whole.Close()
		}()
		r.whole, r.emitting = nil, false
		r.limit, r.sized = firstChunkLimit(r.o.ChunkRows), false
	}
	if time.Since(r.lastWarn) >= 30*time.Second {
		r.lastWarn = time.Now()
		r.o.Log.Warn("initial snapshot: a chunk failed; trying again", "span", r.span.String(), "failures", r.fails, "err", err)
	}
}

// KeyMovedWhileCopying says why a partition whose copy of table went by
// the key columns copied cannot copy on under the table's key now: its
// range's progress, and what the table's other partitions copied, are in
// the old key's terms (rows whose old and new keys fall in different
// partitions would be copied by neither); and what to do. A key column
// renamed is told so too: to the stream, which carries no renames, it is
// a column dropped and another added.
func KeyMovedWhileCopying(table, copied, now string) string {
	return fmt.Sprintf("%s: its primary key's columns changed from %s to %s (moved, or renamed) while the initial snapshot copied it, so its partitions cannot copy the rest of their ranges; copy the table again under its new key: 'cdcctl changefeed pause', 'cdcctl changefeed update --copy-table %s', 'cdcctl changefeed resume'",
		table, copied, now, table)
}

// CopyingTables are, of a changefeed's partitions (their spans and
// progress), the tables with a partition whose copy is not done (still:
// the key it was cut on and copies by; where its partitions still copying
// have copied nothing, the key the others copied it by, which they must
// go by too), and the key columns each table's partitions copied by.
func CopyingTables(spans map[string]model.Span, pt model.ProgressTable) (still map[string]CopyingTable, keys map[string][]string) {
	still, keys = map[string]CopyingTable{}, map[string][]string{}
	for pid, span := range spans {
		c := pt[pid].Copy
		if c.Key != "" && !slices.Contains(keys[span.Table], c.Key) {
			keys[span.Table] = append(keys[span.Table], c.Key)
		}
		if !c.Done {
			ct := still[span.Table]
			ct.KeyTypes = span.Key
			if ct.KeyColumns == "" {
				ct.KeyColumns = span.CopyKey(c)
			}
			still[span.Table] = ct
		}
	}
	for t, ct := range still {
		if ct.KeyColumns == "" && len(keys[t]) == 1 {
			ct.KeyColumns = keys[t][0]
			still[t] = ct
		}
	}
	return still, keys
}
