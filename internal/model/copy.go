package model

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// CopyProgress is how far a partition's share of a database source's
// initial snapshot is, as of its checkpoint: the rows with keys in
// [span.Start, To) have been copied (To is the successor of the last key
// copied: that key and a NUL byte), or all of them when Done. The zero
// value is "nothing copied yet". It rides in the partition's progress, so
// a partition moved, drained or restarted goes on where its copy stood,
// and a split cuts it.
type CopyProgress struct {
	To   string `json:"to,omitempty"`
	Done bool   `json:"done,omitempty"`
	// Rows counts the rows this partition (and, before a split, the whole
	// it was cut from) copied.
	Rows int64 `json:"rows,omitempty"`
	// Key names the primary key's columns the copy goes by (KeyColumns),
	// from its first chunk: To is a key of them. A key moved to other
	// columns while the table copies (one int column to another encodes
	// alike, so the span's key types cannot tell) leaves To, and what
	// the other partitions copied, in the old key's terms: a chunk read
	// under another key is refused, and partitions that copied a table
	// under different keys are told to the operator. Empty for a table
	// without a key, and in progress stored before it was kept.
	Key string `json:"key,omitempty"`
	// Cursor is the last key read where the source reads the span in
	// its own index's order, not in the keys' byte order (a MySQL
	// character key under a collation that folds case: its index orders
	// 'B' before 'a', and a byte range of it is no range of the index,
	// so a chunk of one was a scan and a sort of the rest of the table).
	// The span's rows at or before Cursor in that order are copied; To
	// stays empty. Read counts the rows the copy read, its span's and
	// others' (the order of Cursors is the database's, which Beyond
	// cannot compute). A split gives both halves the cursor: each keeps
	// reading on from it the rows of its own range.
	Cursor string `json:"cursor,omitempty"`
	Read   int64  `json:"read,omitempty"`
	// Order names the index order Cursor is a position in (the key
	// columns' collations): a chunk of another (a collation changed
	// while the table copies, which rewrites no row in the log) starts
	// the cursor over, rather than read on in an order the rows behind
	// it have moved in.
	Order string `json:"order,omitempty"`
	// Only names the relation the copy reads now instead of the whole
	// table, in the source's own terms (PostgreSQL: a partition's OID),
	// and Then those it reads after, space-separated: a copy of the rows
	// a table's partition held when it was attached (PostgreSQL sends
	// none of them). To and Cursor are positions in Only's rows. Strings,
	// not a slice, so that progress compares with ==.
	Only string `json:"only,omitempty"`
	Then string `json:"then,omitempty"`
	// Again is the position of the latest change of the table's rows
	// that the stream did not carry (PostgreSQL: a column's type changed
	// with its values, the table rewritten) for which this copy has
	// begun copying the table again (CopyAgain): a second mark of the
	// same change (a reader started again before it) copies nothing
	// twice.
	Again Ts `json:"again,omitempty"`
	// Horizon is the last key the copy reads (encoded), in the order it
	// reads (To's bytes, or Cursor's index order, where the copy reads
	// the whole table or a key's ranges of values), as of the snapshot
	// of its first full chunk of the relation it reads now, where its
	// source reads one. Every row keyed after it that exists later was
	// written after that snapshot, so the stream carries it: the copy
	// stops at Horizon rather than chase a range that grows as it copies
	// (a serial key's last partition, under inserts faster than its
	// chunks go through the stream, never finished). Debezium's
	// incremental snapshot stops at the key that was the largest when it
	// began, too. Cleared with To when the copy reads another relation,
	// or the table again.
	Horizon string `json:"horizon,omitempty"`
	// Reattached is the position of the latest mark of the relation the
	// copy read then (Only) attached again while it copied it (detached,
	// written, attached: Attached), for which it is to copy that relation
	// once more: the same mark met again copies nothing twice. Apart from
	// Again, whose positions are the changes', not their marks'.
	Reattached Ts `json:"reattached,omitempty"`
}

// Finished is the progress once the relation being copied is copied
// through the span's end: the next one of Then, or Done.
func (c CopyProgress) Finished() CopyProgress {
	c.To, c.Cursor, c.Read, c.Order, c.Horizon = "", "", 0, "", ""
	if c.Then != "" {
		c.Only, c.Then, _ = strings.Cut(c.Then, " ")
		c.Done = false
		return c
	}
	c.Only, c.Done = "", true
	return c
}

// Adds says c has relations to copy (Only, Then) that o has not: a
// copy begun again since o, or one more relation to copy after it (also
// the one it copies now, for a change since o: Again).
func (c CopyProgress) Adds(o CopyProgress) bool {
	if c.Done {
		return false
	}
	if c.Again > o.Again || c.Reattached > o.Reattached {
		return true // copied again after another change: its rows, all over
	}
	if o.Done && (c.Only != "" || c.Then != "") {
		return true
	}
	has := " " + o.Only + " " + o.Then + " "
	for _, rel := range strings.Fields(c.Only + " " + c.Then) {
		if !strings.Contains(has, " "+rel+" ") {
			return true
		}
	}
	return false
}

// Including is the progress once rel is also to be copied: now, where
// the copy is done; after what it copies, where it is not (a relation
// already to be copied is not copied twice).
func (c CopyProgress) Including(rel string) CopyProgress {
	if rel == "" || strings.ContainsRune(rel, ' ') {
		return c
	}
	if c.Done {
		c.Done, c.Only, c.Then = false, rel, ""
		c.To, c.Cursor, c.Read, c.Order, c.Horizon = "", "", 0, "", ""
		return c
	}
	if c.Only == rel || strings.Contains(" "+c.Then+" ", " "+rel+" ") {
		// (The relation it copies now, attached again, is copied once
		// more after: Attached.)
		return c
	}
	if c.Then == "" {
		c.Then = rel
	} else {
		c.Then += " " + rel
	}
	return c
}

// Attached is the progress once a mark at position at says rel was
// attached to the table: Including, except where the copy reads rel now.
// Then rel was detached while it copied it, written, and attached again,
// and the rows written meanwhile came through no stream and may be keyed
// before what the copy has copied (or after its horizon): rel is copied
// once more after this pass, once per mark.
func (c CopyProgress) Attached(rel string, at Ts) CopyProgress {
	if c.Done || c.Only != rel || rel == "" {
		return c.Including(rel)
	}
	if at <= c.Reattached {
		return c
	}
	c.Reattached = at
	if !strings.Contains(" "+c.Then+" ", " "+rel+" ") {
		c.Then = strings.TrimSpace(c.Then + " " + rel)
	}
	return c
}

// CopyAgain is the progress once rel, the table's own relation, is to
// be copied again for a change at position at that rewrote its rows
// without the stream carrying them: at once where the copy is done; after
// what it copies where it is not, also where it copies rel now (what it
// has copied of rel so far holds the rows as they were). A change at or
// before the one the copy began again for is one it has begun for.
func (c CopyProgress) CopyAgain(rel string, at Ts) CopyProgress {
	if rel == "" || strings.ContainsRune(rel, ' ') || at <= c.Again {
		return c
	}
	c.Again = at
	if c.Only != rel || c.Done {
		return c.Including(rel)
	}
	if !strings.Contains(" "+c.Then+" ", " "+rel+" ") {
		c.Then = strings.TrimSpace(c.Then + " " + rel)
	}
	return c
}

// KeyColumns writes a key's column names, in key order, as copies
// record them: "(y, x)"; a name that needs it is quoted.
func KeyColumns(names []string) string {
	if len(names) == 0 {
		return ""
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = n
		// Not valid UTF-8 (a PostgreSQL SQL_ASCII database's name) is
		// quoted too: JSON would store it with U+FFFD for its bytes, and
		// read back it would be another name's. Valid names that merely
		// do not print (a tab, U+3000) stay bare, as copies recorded
		// before this check wrote them, so those records still compare
		// equal after an upgrade.
		if n == "" || strings.ContainsAny(n, `,()" `) || !utf8.ValidString(n) {
			q[i] = strconv.Quote(n)
		}
	}
	return "(" + strings.Join(q, ", ") + ")"
}

// After is the last key copied; false when nothing is.
func (c CopyProgress) After() (string, bool) {
	if c.To == "" {
		return "", false
	}
	return strings.TrimSuffix(c.To, "\x00"), true
}

// CopiedThrough is the progress once key has been copied (by bytes: a
// cursor in index order no longer counts, nor a horizon in that order).
func (c CopyProgress) CopiedThrough(key string) CopyProgress {
	if c.Cursor != "" {
		c.Horizon = ""
	}
	c.To, c.Cursor, c.Read, c.Order = key+"\x00", "", 0, ""
	return c
}

// ReadThrough is the progress once a chunk read in the source's index
// order (Cursor) has been copied: read rows of the table, key the last,
// in order.
func (c CopyProgress) ReadThrough(key, order string, read int) CopyProgress {
	c.Cursor, c.Order, c.Read = key, order, c.Read+int64(read)
	return c
}

// Cut splits the progress of a span at key, as a split cuts the span:
// the lower half [start, key) and the upper half [key, end).
func (c CopyProgress) Cut(key string) (lower, upper CopyProgress) {
	// Both halves keep the marks met (Again, Reattached): one met again
	// copies nothing twice in either.
	if c.Done {
		return CopyProgress{Done: true, Rows: c.Rows, Key: c.Key, Again: c.Again, Reattached: c.Reattached},
			CopyProgress{Done: true, Key: c.Key, Again: c.Again, Reattached: c.Reattached}
	}
	if c.To != "" && c.To >= key {
		// The lower half has copied what it reads now; the upper half
		// has up to To. Both go on with the relations after it.
		lower = CopyProgress{Rows: c.Rows, Key: c.Key, Only: c.Only, Then: c.Then, Again: c.Again, Reattached: c.Reattached}.Finished()
		upper = CopyProgress{Key: c.Key, Only: c.Only, Then: c.Then, Horizon: c.Horizon, Again: c.Again, Reattached: c.Reattached}
		if c.To > key {
			upper.To = c.To
		}
		return lower, upper
	}
	// Both halves go on under the key the copy began with (and from its
	// cursor, in index order), and stop at its horizon: an upper half
	// wholly after it has nothing to copy.
	return c, CopyProgress{Key: c.Key, Cursor: c.Cursor, Read: c.Read, Order: c.Order, Only: c.Only, Then: c.Then, Horizon: c.Horizon, Again: c.Again, Reattached: c.Reattached}
}

// Beyond says c has copied more than o (of the same span, along one
// partition's line: rows read in index order count from where the
// partition began, and two partitions' counts do not compare).
func (c CopyProgress) Beyond(o CopyProgress) bool {
	switch {
	case c.Done || o.Done:
		return c.Done && !o.Done
	case c.Cursor != "" || o.Cursor != "":
		return c.Read > o.Read
	default:
		return c.To > o.To
	}
}

// CopySummary sums the copy progress of a changefeed's partitions for
// operators: "done", or how many partitions have finished and how many
// rows were copied.
func CopySummary(pt ProgressTable) string {
	done, attached := 0, 0
	var rows int64
	for _, p := range pt {
		if p.Copy.Done {
			done++
		}
		if p.Copy.Only != "" || p.Copy.Then != "" {
			attached++
		}
		rows += p.Copy.Rows
	}
	if done == len(pt) {
		return "done (" + strconv.FormatInt(rows, 10) + " rows copied)"
	}
	s := "copying: " + strconv.Itoa(done) + " of " + strconv.Itoa(len(pt)) + " partitions done, " + strconv.FormatInt(rows, 10) + " rows copied"
	if attached > 0 {
		s += "; " + strconv.Itoa(attached) + " copying rows again that the stream did not carry (a partition attached, a column retyped)"
	}
	return s
}
