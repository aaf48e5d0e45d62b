package source

// A change may leave columns out: PostgreSQL does not send a TOASTed
// value an update did not touch (the sink keeps the row's value). The
// watermark algorithm drops a chunk's row when the stream changed its key
// while the chunk was read (chunk.go), trusting the stream's row to be
// newer and whole; a row that leaves a column out is not whole, and the
// sink was never given the value it keeps — the row's copy was the one
// dropped. So at its high watermark the chunk also returns, for each such
// key, an update giving the columns that every change the read may not
// have seen left out (and only the key besides): those columns did not
// change in that time, so the chunk read their value. A column one of
// those changes gave is the sink's already, and may be newer than the
// read; a row deleted or inserted meanwhile was given whole.

import "github.com/cdcctl/cdcctl/internal/model"

// leftOut is the columns an update left out, nil when it gave them all
// (an insert or a delete gives the whole row, or its end).
func leftOut(e *Event) []string {
	if e.Op != OpUpdate || e.Def == nil {
		return nil
	}
	var left []string
	for i, v := range e.New {
		if v.Unchanged && i < len(e.Def.Columns) {
			left = append(left, e.Def.Columns[i].Name)
		}
	}
	return left
}

// unsent is, by key, the columns that every change the chunk's read may
// not have seen left out: those after its low watermark and those of the
// transactions before it the read did not see (racy). Empty when every
// change gave its columns, as they do but for PostgreSQL's TOAST. r.mu is
// held.
func (r *CopyReader) unsent(c *Chunk, racy []model.Ts) map[string][]string {
	leftSome := false
	for i := range r.seen {
		if r.seen[i].left != nil {
			leftSome = true
			break
		}
	}
	if !leftSome || !c.open {
		return nil
	}
	unseen := func(ts model.Ts) bool {
		if ts > c.lowAt {
			return true
		}
		for _, x := range racy {
			if x == ts {
				return true
			}
		}
		return false
	}
	want := map[string][]string{}
	given := map[string]bool{} // keys a change gave whole: nothing to add
	for _, s := range r.seen {
		if given[s.key] || !unseen(s.ts) {
			continue
		}
		cols, met := want[s.key]
		switch {
		case s.left == nil:
			given[s.key] = true
			delete(want, s.key)
		case !met:
			want[s.key] = s.left
		default:
			want[s.key] = both(cols, s.left)
		}
	}
	for k, cols := range want {
		if len(cols) == 0 {
			delete(want, k)
		}
	}
	return want
}

// both is the columns in a and in b.
func both(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
				break
			}
		}
	}
	return out
}

// fills are the updates at the high watermark hw that give the sink the
// columns want names of the chunk's rows the stream changed: the key's
// columns and those, every other column left out. Called before emit,
// which reuses the rows' space.
func (c *Chunk) fills(hw *Event, want map[string][]string) []Event {
	if len(want) == 0 {
		return nil
	}
	var out []Event
	for _, e := range c.Rows {
		cols := want[e.Key]
		if len(cols) == 0 || !c.dropped[e.Key] {
			continue
		}
		vals := make([]Value, len(e.New))
		for i := range vals {
			if c.Def.Columns[i].KeyPos > 0 {
				vals[i] = e.New[i]
			} else {
				vals[i] = Value{Unchanged: true}
			}
		}
		for _, name := range cols {
			if j := c.Def.Index(name); j >= 0 {
				vals[j] = e.New[j]
			}
		}
		out = append(out, Event{Kind: KindDML, Table: c.Table, Def: hw.Def, CommitTs: hw.CommitTs,
			SchemaVersion: hw.SchemaVersion, TableVersion: hw.TableVersion, Op: OpUpdate, Key: e.Key, New: vals})
	}
	return out
}
