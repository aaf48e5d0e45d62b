package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// The initial snapshot copies the rows that exist when a changefeed is
// created, consistent with the stream, in key-ordered chunks: Netflix's
// DBLog watermark algorithm. For each chunk the reader
//
//  1. writes a low watermark into the WAL (a logical decoding message),
//  2. selects the chunk (the next rows of the table in key order),
//  3. writes a high watermark;
//
// then, reading the stream, it drops from the chunk every key that a
// transaction between the two watermarks changed (the stream carries the
// newer row), and at the high watermark emits the rest as inserts at
// that transaction's position. No row is missed: a row the chunk does not
// hold was changed in the stream after the chunk saw it. No row is applied
// twice over a newer one. The resume point carries the snapshot's
// progress, so a reader that starts elsewhere goes on at the next chunk.

// snapshotProgress is where the snapshot stands in a resume point.
type snapshotProgress struct {
	// Tables are still to copy, in order; the first is being copied.
	Tables []string `json:"tables"`
	// After is the first table's key (its key columns' text) copied up to.
	After []string `json:"after,omitempty"`
	// Rows counts the rows copied so far.
	Rows int64 `json:"rows"`
}

func (p *snapshotProgress) done() bool { return p == nil || len(p.Tables) == 0 }

// chunkRows is how many rows one chunk reads, and chunksInFlight how many
// chunks are read ahead of the stream's watermarks: the reader does not
// wait for one chunk's high watermark to read the next.
var chunkRows = 16384 // a variable: tests read many small chunks

const chunksInFlight = 3

// mark is a watermark's content.
type mark struct {
	Kind string `json:"kind"` // low or high
	ID   string `json:"id"`
}

// chunk is a chunk in flight between its watermarks.
type chunk struct {
	id    string
	table string
	after []string                // the key it reads after
	rows  map[string]source.Event // by key; dropped when the stream changes the key
	order []string                // keys in key order
	last  []string                // the chunk's last key
	full  bool                    // as many rows as asked: the table may hold more
	open  bool                    // the low watermark was seen
}

// snapshotConn opens the connection chunks are read on. The simple
// protocol returns values in their text form, as pgoutput sends them.
func snapshotConn(ctx context.Context, cfg Config) (*pgx.Conn, error) {
	pc, err := pgx.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, err
	}
	pc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, explain(cfg, err)
	}
	return conn, nil
}

// startChunk writes the low watermark, reads the chunk of table after a
// key (nil: from the start) and writes the high watermark.
func startChunk(ctx context.Context, conn *pgx.Conn, cfg Config, table string, after []string, def *source.TableDef) (*chunk, error) {
	c := &chunk{id: fmt.Sprint(time.Now().UnixNano()), table: table, after: after, rows: map[string]source.Event{}}
	emit := func(kind string) error {
		b, _ := json.Marshal(mark{Kind: kind, ID: c.id})
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, markPrefix, string(b))
		return err
	}
	if err := emit("low"); err != nil {
		return nil, fmt.Errorf("snapshot of %s: write the low watermark: %w", c.table, explain(cfg, err))
	}
	keys := def.KeyNames()
	cols := make([]string, len(def.Columns))
	for i, col := range def.Columns {
		cols[i] = pgx.Identifier{col.Name}.Sanitize()
	}
	keyCols := make([]string, len(keys))
	for i, k := range keys {
		keyCols[i] = pgx.Identifier{k}.Sanitize()
	}
	q := fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), quoteQualified(c.table))
	var args []any
	if len(after) == len(keys) {
		ph := make([]string, len(keys))
		for i, v := range after {
			ph[i] = fmt.Sprintf("$%d", i+1)
			args = append(args, v)
		}
		q += fmt.Sprintf(" WHERE (%s) > (%s)", strings.Join(keyCols, ", "), strings.Join(ph, ", "))
	}
	q += fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(keyCols, ", "), chunkRows)
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", c.table, explain(cfg, err))
	}
	n := 0
	for rows.Next() {
		raw := rows.RawValues()
		vals := make([]source.Value, len(raw))
		for i, v := range raw {
			if v == nil {
				vals[i] = source.Null
			} else {
				vals[i] = source.Text(string(v))
			}
		}
		key, err := keyOf(def, vals)
		if err != nil {
			rows.Close()
			return nil, err
		}
		c.rows[key] = source.Event{Kind: source.KindDML, Table: c.table, Def: def, Op: source.OpInsert, Key: key, New: vals}
		c.order = append(c.order, key)
		c.last = c.last[:0]
		for _, k := range keys {
			c.last = append(c.last, vals[def.Index(k)].Text)
		}
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", c.table, explain(cfg, err))
	}
	c.full = n == chunkRows
	if err := emit("high"); err != nil {
		return nil, fmt.Errorf("snapshot of %s: write the high watermark: %w", c.table, explain(cfg, err))
	}
	return c, nil
}

// observe applies a committed transaction to the chunk in flight: its
// watermarks, and the keys it changed while the window is open. It
// returns true at the high watermark.
func (c *chunk) observe(tx *Txn) bool {
	high := false
	for _, m := range tx.Marks {
		var mk mark
		if json.Unmarshal(m, &mk) != nil || mk.ID != c.id {
			continue // another reader's chunk, or an earlier run's
		}
		switch mk.Kind {
		case "low":
			c.open = true
		case "high":
			high = true
		}
	}
	c.observeRows(tx.Events)
	return high
}

// observeRows drops from the chunk the keys that rows committed after its
// low watermark change: the stream carries the newer row.
func (c *chunk) observeRows(events []source.Event) {
	if !c.open {
		return
	}
	for i := range events {
		if e := &events[i]; e.Kind == source.KindDML && e.Table == c.table {
			delete(c.rows, e.Key)
		}
	}
}

// emit turns what is left of the chunk into inserts at the high
// watermark's position, under the table's current schema version.
func (c *chunk) emit(tx *Txn, st TableState) []source.Event {
	out := make([]source.Event, 0, len(c.rows))
	for _, k := range c.order {
		e, ok := c.rows[k]
		if !ok {
			continue
		}
		e.CommitTs, e.SchemaVersion, e.TableVersion = tx.Ts, st.Version, st.Since
		out = append(out, e)
	}
	return out
}

// advance moves the progress past a chunk that has been emitted (chunks
// are emitted in the order they were read).
func (p *snapshotProgress) advance(c *chunk, emitted int) *snapshotProgress {
	next := &snapshotProgress{Tables: p.Tables, After: p.After, Rows: p.Rows + int64(emitted)}
	if c.full {
		next.After = append([]string(nil), c.last...)
	} else {
		next.Tables, next.After = p.Tables[1:], nil
	}
	return next
}

// nextChunk says what the chunk after the ones in flight reads: a table
// and the key after which; false when the snapshot has nothing more to
// read beyond them.
func nextChunk(p *snapshotProgress, inFlight []*chunk) (string, []string, bool) {
	if p.done() {
		return "", nil, false
	}
	tables, after := p.Tables, p.After
	for _, c := range inFlight {
		if c.full {
			after = c.last
		} else {
			tables, after = tables[1:], nil
		}
	}
	if len(tables) == 0 {
		return "", nil, false
	}
	return tables[0], after, true
}

// snapshotStatus describes the snapshot's progress for operators.
func snapshotStatus(cfg Config, persisted source.Position) string {
	if cfg.Snapshot == "never" {
		return "none (snapshot=never: only changes after creation)"
	}
	var p position
	if json.Unmarshal(persisted, &p) != nil {
		return ""
	}
	if p.Snapshot.done() {
		return "done"
	}
	at := "starting"
	if len(p.Snapshot.After) > 0 {
		at = "after key (" + strings.Join(p.Snapshot.After, ",") + ")"
	}
	return fmt.Sprintf("copying %s %s; %d of %d tables left; %d rows copied", p.Snapshot.Tables[0], at, len(p.Snapshot.Tables), len(cfg.Tables), p.Snapshot.Rows)
}
