package mysql

// The initial snapshot: source.CopyReader's watermark algorithm
// (source/chunk.go) with MySQL's chunks. A chunk's watermarks are rows of
// the signal table, mark/<start>/<table>/<chunk>/<low|high>, inserted in
// transactions of their own; the puller turns each into a mark event of
// the table at its transaction's position (marksIn). The chunk is read
// between them in a consistent snapshot: InnoDB commits in binary log
// order, so the read sees every transaction before the low watermark and
// none after the high one — unlike PostgreSQL, no transaction before the
// low watermark can be missed, and no global read lock is taken.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// markPrefix begins the names of a changefeed's watermark rows.
func markPrefix(cfg Config) string { return fmt.Sprintf("mark/%d/", cfg.Start) }

// tableTag names a table in a watermark row: the signal table's names
// are short (VARCHAR(128)), a table's name need not be.
func tableTag(table string) string {
	h := fnv.New32a()
	h.Write([]byte(table))
	return fmt.Sprintf("%08x", h.Sum32())
}

// OpenCopying implements source.Copier: a partition copies its share of
// the initial snapshot as it reads, and once it is copied, its share of
// a table copied again (again.go). With snapshot=never it reads the log.
func (s *Source) OpenCopying(span model.Span, from model.Ts, copied model.CopyProgress) (source.Reader, error) {
	if s.cfg.Snapshot == "never" {
		return s.LogSource.Open(span, from)
	}
	return s.LogSource.NewCopyReader(span, from, copied, source.CopyOptions{
		Chunks: s, ChunkRows: s.cfg.ChunkRows, Slots: &s.slots, Pace: s.pace, Log: s.log,
	}), nil
}

// ReadChunk implements source.ChunkReader: the next rows of a span after
// what is copied, between the chunk's watermarks.
func (s *Source) ReadChunk(ctx context.Context, span model.Span, copied model.CopyProgress, ask source.ChunkAsk, register func(*source.Chunk) bool, loaded func(*source.Chunk)) (*source.Chunk, error) {
	db, err := s.snapshotDB(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", span.Table, explain(s.cfg, err))
	}
	defer conn.Close()
	def, _, err := tableDef(ctx, conn, span.Table)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", span.Table, explain(s.cfg, err))
	}
	if len(def.KeyNames()) == 0 {
		return nil, fmt.Errorf("snapshot of %s: the table has no primary key now; its changefeed was created with one", span.Table)
	}
	limit := ask.Rows
	how, err := s.planChunk(ctx, conn, def, span, copied, limit)
	if err != nil {
		return nil, err
	}
	q, more, horizon := how.q, how.more, how.horizon
	c := source.NewChunk(span.Table, def, limit)
	c.Ordered, c.Order = how.ordered, how.order
	if !register(c) {
		return nil, nil
	}
	signal := quoteTable(model.TableName(s.cfg.Database, signalTable))
	name := func(kind string) string {
		return markPrefix(s.cfg) + tableTag(span.Table) + "/" + c.ID + "/" + kind
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("snapshot of %s: %s: %w", span.Table, what, explain(s.cfg, err))
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO "+signal+" (changefeed, at) VALUES (?, 0)", name("low")); err != nil {
		return nil, fail("write the low watermark (the user needs INSERT and DELETE on "+s.cfg.Database+"."+signalTable+")", err)
	}
	if more == nil {
		ask.Most = ask.Rows
	}
	if how.plain != nil {
		b := s.budgetedRead(s.mariaDB(ctx, conn), how)
		q, more, horizon = b.q, b.more, b.horizon
	}
	err = readChunk(ctx, conn, c, q, ask, more, horizon)
	if how.plain != nil && overBudget(err) {
		// The span's rows are sparse in the index here: read as every
		// partition read before the filter, in the same window (the same
		// reads, so the same ask).
		s.markSparse(span)
		c.Forget(limit)
		p := how.plain
		err = readChunk(ctx, conn, c, p.q, ask, p.more, p.horizon)
	}
	if err != nil {
		return nil, fail("read", err)
	}
	c.Within(span.Contains)
	loaded(c)
	// The high watermark, and both rows gone, in one transaction: the
	// puller meets the insert; the deletes are nothing to it.
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, fail("write the high watermark", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+signal+" (changefeed, at) VALUES (?, 0)", name("high")); err != nil {
		return nil, fail("write the high watermark", err)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+signal+" WHERE changefeed IN (?, ?)", name("low"), name("high")); err != nil {
		return nil, fail("write the high watermark", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fail("write the high watermark", err)
	}
	return c, nil
}

// snapshotDB is the node's connection pool for chunks: at most
// copyConns connections at once per changefeed.
func (s *Source) snapshotDB(ctx context.Context) (*sql.DB, error) {
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	if s.db != nil {
		return s.db, nil
	}
	db, err := openSignal(ctx, s.cfg) // its sessions write watermarks
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(copyConns)
	db.SetMaxIdleConns(copyConns)
	s.db = db
	return db, nil
}

// copyConns bounds the chunks one node reads at once per changefeed.
const copyConns = 4

// readChunk reads a chunk's rows in a consistent snapshot: by q, and
// where the chunk may grow (source.ChunkAsk), as many more as
// Chunk.Grow says by more's query; where it is full, the last row the
// copy reads (its span's in byte ranges; in the index's order, of what
// the partition reads) by horizon's query, in the same snapshot
// (Chunk.SetHorizon). The server sends them in UTF-8 (a
// latin1 column's too), as the stream renders them.
//
// The rows are read from the driver itself, under database/sql: its
// locking and conversions per value were a quarter of a chunk's CPU,
// and a partition's copy is bound by the CPU (each row's text is copied
// once, into the chunk, before the next row overwrites the driver's
// buffer).
func readChunk(ctx context.Context, conn *sql.Conn, c *source.Chunk, q string, ask source.ChunkAsk, more func(*source.Chunk, int) (string, error), horizon func() (string, error)) error {
	if c.Ordered && temporalKey(c.Def) {
		if err := allowZeroDates(ctx, conn); err != nil {
			return err
		}
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return err
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck // a read-only transaction
	return conn.Raw(func(dc any) error {
		qc, ok := dc.(driver.QueryerContext)
		if !ok {
			return fmt.Errorf("the MySQL driver cannot run a query on its own (%T)", dc)
		}
		if err := readRows(ctx, qc, c, q); err != nil {
			return err
		}
		if n := c.Grow(ask); n > 0 {
			q, err := more(c, n)
			if err != nil {
				return err
			}
			if err := readRows(ctx, qc, c, q); err != nil {
				return err
			}
		}
		if !c.Full || horizon == nil {
			return nil
		}
		q, err := horizon()
		if err != nil {
			return err
		}
		last := source.NewChunk(c.Table, c.Def, 1)
		if err := readRows(ctx, qc, last, q); err != nil {
			return err
		}
		c.SetHorizon(last.Last)
		return nil
	})
}

// readRows adds to chunk c the rows of query q.
func readRows(ctx context.Context, qc driver.QueryerContext, c *source.Chunk, q string) error {
	rows, err := qc.QueryContext(ctx, q, nil)
	if err != nil {
		return err
	}
	defer rows.Close()
	keyIdx := keyIndexes(c.Def)
	types := keyTypes(c.Def)
	n := len(c.Def.Columns)
	if got := len(rows.Columns()); got != n {
		return fmt.Errorf("the query returned %d columns, the table has %d", got, n)
	}
	dest := make([]driver.Value, n)
	vals := make([][]byte, n)
	digits := make([][]byte, n) // a parsed number's text, per column
	if c.Rows == nil {
		c.Rows = make([]source.Event, 0, c.Limit)
	}
	for {
		if err := rows.Next(dest); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		for i, v := range dest {
			// The driver parses the text of integers and floats; they
			// are written back as database/sql writes them into
			// RawBytes, which is what the rows were read as before.
			switch v := v.(type) {
			case nil:
				vals[i] = nil
			case []byte:
				vals[i] = v
			case int64:
				digits[i] = strconv.AppendInt(digits[i][:0], v, 10)
				vals[i] = digits[i]
			case uint64:
				digits[i] = strconv.AppendUint(digits[i][:0], v, 10)
				vals[i] = digits[i]
			case float32:
				digits[i] = strconv.AppendFloat(digits[i][:0], float64(v), 'g', -1, 32)
				vals[i] = digits[i]
			case float64:
				digits[i] = strconv.AppendFloat(digits[i][:0], v, 'g', -1, 64)
				vals[i] = digits[i]
			default:
				// A DSN that asks for parsed times (parseTime) would
				// give time.Time: the rows are the server's text.
				return fmt.Errorf("column %s came back as %T, not as the server's text", c.Def.Columns[i].Name, v)
			}
		}
		if err := c.AddRow(vals, keyIdx, types); err != nil {
			return err
		}
	}
	c.Loaded()
	return nil
}

// keyOrder is the key columns as a row the way keys are routed: integer
// keys by value, any other by the bytes of its text (UTF-8; the
// column's collation would fold case and ignore trailing spaces), so
// the chunks of a partition are exactly its key range. An integer key's
// order is the primary key's index's, and so is a BINARY or VARBINARY
// key's (compared byte by byte, its text being its bytes): those columns
// stand as they are, so that a chunk is a range read of the index (a
// BINARY(16) uuid key cast to bytes was sorted, the rest of the table for
// every chunk). Character keys are cast and sorted.
func keyOrder(def *source.TableDef) []string {
	var exprs []string
	for _, k := range def.KeyNames() {
		col := def.Columns[def.Index(k)]
		expr := quoteIdent(k)
		switch {
		case keyType(col.Type) == "int8", bytesKey(col.Type):
		case binaryType(col.Type):
			expr = "CAST(" + expr + " AS BINARY)"
		default:
			expr = "CAST(CONVERT(" + expr + " USING utf8mb4) AS BINARY)"
		}
		exprs = append(exprs, expr)
	}
	return exprs
}

// rangeIndexed says a table's byte ranges are ranges of its key's index:
// every key column an integer or bytes, which keyOrder leaves as they
// are.
func rangeIndexed(def *source.TableDef) bool {
	for _, k := range def.KeyNames() {
		if t := def.Columns[def.Index(k)].Type; keyType(t) != "int8" && !bytesKey(t) {
			return false
		}
	}
	return len(def.KeyNames()) > 0
}

// bytesKey says a key column is BINARY(n) or VARBINARY(n): ordered by its
// index as by its bytes.
func bytesKey(colType string) bool {
	t := strings.ToLower(colType)
	return strings.HasPrefix(t, "binary") || strings.HasPrefix(t, "varbinary")
}

// binaryType says a column holds bytes, not characters: its text is its
// bytes as they are.
func binaryType(colType string) bool {
	t := strings.ToLower(colType)
	return bytesKey(t) || strings.HasSuffix(t, "blob") || strings.HasPrefix(t, "bit")
}

// rangeQuery is the SELECT of a chunk: the next rows of a span in key
// order after the last key copied (or from the span's start).
func rangeQuery(def *source.TableDef, span model.Span, copied model.CopyProgress, limit int) (string, error) {
	return source.RangeQuery(selectList(def), quoteTable(span.Table), keyOrder(def), span, copied, limit, keyLiteral(def))
}

// lastRowQuery is the SELECT of the last row rangeQuery would read: in a
// full chunk's snapshot, its key is the copy's horizon
// (model.CopyProgress.Horizon).
func lastRowQuery(def *source.TableDef, span model.Span, copied model.CopyProgress) (string, error) {
	return source.LastRowQuery(selectList(def), quoteTable(span.Table), keyOrder(def), span, copied, keyLiteral(def))
}

// selectList is the table's columns, as a chunk selects them.
func selectList(def *source.TableDef) string {
	cols := make([]string, len(def.Columns))
	for i, c := range def.Columns {
		cols[i] = quoteIdent(c.Name)
	}
	return strings.Join(cols, ", ")
}

// keyLiteral writes the i-th value of a chunk's key bound.
func keyLiteral(def *source.TableDef) func(i int, v string) (string, error) {
	keys := def.KeyNames()
	return func(i int, v string) (string, error) {
		// Literals, not parameters: a query without them is sent as text
		// and answered in the text protocol, the form the stream renders
		// values in (values.go).
		if i < len(keys) && keyType(def.Columns[def.Index(keys[i])].Type) == "int8" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return "", fmt.Errorf("key %q is not an integer", v)
			}
			return strconv.FormatInt(n, 10), nil
		}
		return "X'" + hex.EncodeToString([]byte(v)) + "'", nil
	}
}

// marksIn turns the watermark rows a change of the signal table inserts
// for this changefeed into mark events of their tables, each with its
// table's schema at the reader's position (the caller leaves out held
// tables').
func (p *Puller) marksIn(e *replication.RowsEvent, tables map[string]tableState) []source.Event {
	prefix := markPrefix(p.cfg)
	var out []source.Event
	for _, r := range e.Rows {
		if len(r) != 2 {
			continue
		}
		rest, ok := strings.CutPrefix(signalName(r[0]), prefix)
		if !ok {
			continue
		}
		parts := strings.Split(rest, "/")
		if len(parts) != 3 {
			continue
		}
		for table, st := range tables {
			if tableTag(table) != parts[0] {
				continue
			}
			mk := source.Mark{Kind: parts[2], ID: parts[1], Table: table}
			if mk.Kind == source.MarkAgain {
				// The table copied again (again.go): its tag stands for it
				// in the copy's progress; the ID is where the change was.
				at, err := strconv.ParseUint(parts[1], 10, 64)
				if err != nil {
					continue
				}
				mk.ID, mk.At = parts[0], model.Ts(at)
			}
			b, _ := json.Marshal(mk)
			out = append(out, source.Event{Kind: source.KindMark, Table: table, Def: st.Def,
				SchemaVersion: st.Version, TableVersion: st.Since, Statement: string(b)})
		}
	}
	return out
}
