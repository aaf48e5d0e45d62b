package source

// The copy of a table without a primary key, from one snapshot: all its
// rows go out at one position (its first chunk's high watermark).

import (
	"context"
	"fmt"
)

// WholeCopy is the copy of a table without a key: its rows cannot be
// told apart, so a chunk's window cannot apply nor a copy resume after
// some rows; every row goes out at one position, from one snapshot,
// fetched chunk by chunk as the rows before go out.
type WholeCopy interface {
	// Fetch reads the snapshot's next rows into c.
	Fetch(ctx context.Context, c *Chunk) error
	// Def is the table's definition the snapshot was taken under.
	Def() *TableDef
	// Close ends the snapshot; closing twice is harmless.
	Close()
}

// startWhole starts the copy of a table without a key: its snapshot and
// first chunk (limit rows at most), between watermarks.
func (r *CopyReader) startWhole(limit int) {
	if r.o.Whole == nil {
		r.mu.Lock()
		r.failed(fmt.Errorf("snapshot of %s: the table has no primary key, and this source copies only tables with one", r.span.Table))
		r.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, chunkTimeout)
	defer cancel()
	c, whole, err := r.o.Whole(ctx, r.span.Table, limit)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed(err)
		return
	}
	c.loaded = true
	r.chunks, r.whole = []*Chunk{c}, whole
}

// fetchWhole reads the next rows (limit at most) of a table without a
// key from its snapshot, to go out at the same position as the first. A failure there
// cannot resume (the rows cannot say which went out): the copy starts
// over, and the rows that went out are written twice.
func (r *CopyReader) fetchWhole(limit int) {
	ctx, cancel := context.WithTimeout(context.Background(), chunkTimeout)
	defer cancel()
	r.mu.Lock()
	whole, at := r.whole, r.wholeAt
	r.mu.Unlock()
	c := NewChunk(r.span.Table, whole.Def(), limit)
	err := whole.Fetch(ctx, c)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed(fmt.Errorf("%w; the rows of it already written will be written again", err))
		return
	}
	for i := range c.Rows {
		e := &c.Rows[i]
		e.Def, e.CommitTs, e.SchemaVersion, e.TableVersion = at.Def, at.CommitTs, at.SchemaVersion, at.TableVersion
	}
	r.next.Rows += int64(len(c.Rows))
	r.out = c.Rows
	r.sizeAfter(c)
	if !c.Full {
		r.next.Done = true
		r.emitting = false
		whole.Close()
		r.whole = nil
		if len(r.out) == 0 {
			r.copied = r.next
		}
	}
}
