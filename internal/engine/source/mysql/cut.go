package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Verify compares the tables read at one consistent point with the sink
// rebuilt up to the changefeed's position of that point. Positions come
// from the binary log (the puller's clock), so only the puller can say
// which position a read's point is:
//
//  1. the reader opens a consistent snapshot, whose place in the binary
//     log MariaDB reports (binlog_snapshot_file and _position: every
//     transaction before it is in the read, none after), and reads the
//     tables in it;
//  2. it asks the changefeed's puller for the cut: a row of the signal
//     table named cut/<changefeed start>/<file>/<position>/<nonce>;
//  3. the puller, meeting that row in the binary log (after the point,
//     so it has given every transaction before the point its position),
//     writes into the row the position of the last transaction at or
//     before the point;
//  4. the reader takes the answer and deletes the row.
//
// The cut is exact: transactions in the read are at or below it, the
// others above, whatever their commit times (MariaDB's are in seconds).

// cutAnswer is a cut the puller answers: the signal row and the position.
type cutAnswer struct {
	name string
	at   int64 // the position; -1: the point is older than what the puller remembers
}

// cutPrefix begins the names of a changefeed's cut requests.
func cutPrefix(cfg Config) string { return fmt.Sprintf("cut/%d/", cfg.Start) }

// signalName is a signal row's name as the binary log carries it.
func signalName(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return fmt.Sprint(v)
}

// answerCuts answers the cut requests for this changefeed in a change of
// the signal table: those not answered yet (at = 0).
func (p *Puller) answerCuts(e *replication.RowsEvent) {
	prefix := cutPrefix(p.cfg)
	for _, r := range e.Rows {
		if len(r) != 2 {
			continue
		}
		name := signalName(r[0])
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if v, ok := r[1].(int64); !ok || v != 0 {
			continue // an answer, or not a request
		}
		parts := strings.Split(rest, "/")
		if len(parts) != 3 {
			continue
		}
		pos, err := strconv.ParseUint(parts[1], 10, 32)
		if err != nil {
			continue
		}
		a := cutAnswer{name: name, at: -1}
		if ts, ok := p.positionAt(parts[0], uint32(pos)); ok {
			a.at = int64(ts)
		}
		select {
		case p.answers <- a:
		default: // the writer is behind: verify asks again
		}
	}
}

// positionAt is the position of the last transaction that ends at or
// before a binary log point; false when the point is before the oldest
// resume point the puller keeps.
func (p *Puller) positionAt(file string, pos uint32) (model.Ts, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := func(f string, q uint32) bool { // (f, q) at or before the point
		if f == file {
			return q <= pos
		}
		return !binlogAtOrAfter(f, file)
	}
	for i := len(p.points) - 1; i >= 0; i-- {
		if before(p.points[i].File, p.points[i].Pos) {
			return p.points[i].Ts, true
		}
	}
	return 0, false
}

// serverOf reads the server's flavor and id.
func serverOf(ctx context.Context, cfg Config) (Server, error) {
	db, err := open(ctx, cfg)
	if err != nil {
		return Server{}, err
	}
	defer db.Close()
	var srv Server
	var lowerCase int
	if err := db.QueryRowContext(ctx, "SELECT @@version, @@server_id, @@lower_case_table_names").Scan(&srv.Version, &srv.ServerID, &lowerCase); err != nil {
		return Server{}, explain(cfg, err)
	}
	srv.FoldsNames = lowerCase != 0
	srv.Flavor = flavorOf(srv.Version)
	return srv, nil
}

// TableReader reads a changefeed's tables for verify, with the
// changefeed's position of the read (the cut above).
type TableReader struct {
	cfg Config
	// CutTimeout bounds the wait for the puller's answer.
	CutTimeout time.Duration
}

// NewTableReader reads the tables of a stored URI; password, when not
// empty, replaces the URI's (the API keeps stored passwords apart).
func NewTableReader(uri, password string) (*TableReader, []string, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, nil, err
	}
	if password != "" {
		cfg.Password = password
	}
	if cfg.ServerID == 0 {
		return nil, nil, fmt.Errorf("source URI %s: not a changefeed's stored URI (server-id is set when it is created)", Redact(uri))
	}
	return &TableReader{cfg: cfg, CutTimeout: 30 * time.Second}, cfg.Tables, nil
}

// Snapshot reads the tables at one consistent point; the time returned
// is the position's, rounded down to its millisecond. Verify uses
// SnapshotAt, which is exact.
func (r *TableReader) Snapshot(ctx context.Context, tables []string) (time.Time, map[string]map[string]map[string]*string, error) {
	at, rows, err := r.SnapshotAt(ctx, tables)
	return at.Time(), rows, err
}

// errCutTooOld: the puller no longer remembers the read's point; a new
// read is newer.
var errCutTooOld = errors.New("the changefeed's reader no longer remembers the point of the read")

// SnapshotAt reads the tables at one consistent point and returns the
// changefeed's position of that point: every transaction in the read is
// at or below it, every later one above. Rows are by primary key (the
// key columns' text joined by commas), column name to text (nil for
// NULL).
func (r *TableReader) SnapshotAt(ctx context.Context, tables []string) (model.Ts, map[string]map[string]map[string]*string, error) {
	db, err := openSignal(ctx, r.cfg) // it asks for a cut in the signal table
	if err != nil {
		return 0, nil, err
	}
	defer db.Close()
	for attempt := 0; ; attempt++ {
		file, pos, rows, err := r.read(ctx, db, tables)
		if err != nil {
			return 0, nil, err
		}
		at, err := r.cut(ctx, db, file, pos)
		if errors.Is(err, errCutTooOld) && attempt < 3 {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		return at, rows, nil
	}
}

// read reads the tables in one consistent snapshot and returns its
// binary log point.
func (r *TableReader) read(ctx context.Context, db *sql.DB, tables []string) (string, uint32, map[string]map[string]map[string]*string, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", 0, nil, explain(r.cfg, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return "", 0, nil, explain(r.cfg, err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck // a read-only transaction
	status := map[string]string{}
	st, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return "", 0, nil, explain(r.cfg, err)
	}
	for st.Next() {
		var k, v string
		if st.Scan(&k, &v) == nil {
			status[strings.ToLower(k)] = v
		}
	}
	st.Close()
	file := status["binlog_snapshot_file"]
	pos, perr := strconv.ParseUint(status["binlog_snapshot_position"], 10, 32)
	if file == "" || perr != nil {
		return "", 0, nil, fmt.Errorf("%s does not say where its consistent snapshot stands in the binary log (binlog_snapshot_file and binlog_snapshot_position are MariaDB's): verify of a MySQL changefeed needs MariaDB for now (docs/mysql.md)", r.cfg.Addr())
	}
	out := map[string]map[string]map[string]*string{}
	for _, t := range tables {
		rows, err := r.readTable(ctx, conn, t)
		if err != nil {
			return "", 0, nil, err
		}
		out[t] = rows
	}
	return file, uint32(pos), out, nil
}

// readTable reads one table whole, rows by primary key.
func (r *TableReader) readTable(ctx context.Context, conn *sql.Conn, table string) (map[string]map[string]*string, error) {
	var keys []string
	kr, err := conn.QueryContext(ctx, "SHOW KEYS FROM "+quoteTable(table)+" WHERE Key_name = 'PRIMARY'")
	if err != nil {
		return nil, explain(r.cfg, err)
	}
	kcols, _ := kr.Columns()
	for kr.Next() {
		vals := make([]sql.RawBytes, len(kcols))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := kr.Scan(ptrs...); err != nil {
			kr.Close()
			return nil, err
		}
		for i, c := range kcols {
			if strings.EqualFold(c, "Column_name") {
				keys = append(keys, string(vals[i]))
			}
		}
	}
	kr.Close()
	rows, err := conn.QueryContext(ctx, "SELECT * FROM "+quoteTable(table))
	if err != nil {
		return nil, explain(r.cfg, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]*string{}
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := make(map[string]*string, len(cols))
		for i, c := range cols {
			if vals[i] != nil {
				v := string(vals[i])
				row[c] = &v
			} else {
				row[c] = nil
			}
		}
		kv := make([]string, len(keys))
		for i, k := range keys {
			if v := row[k]; v != nil {
				kv[i] = *v
			}
		}
		out[model.JoinKeyTexts(kv)] = row
	}
	return out, rows.Err()
}

// cut asks the changefeed's puller for the position of a binary log
// point and waits for its answer.
func (r *TableReader) cut(ctx context.Context, db *sql.DB, file string, pos uint32) (model.Ts, error) {
	signal := quoteTable(model.TableName(r.cfg.Database, signalTable))
	name := fmt.Sprintf("%s%s/%d/%d", cutPrefix(r.cfg), file, pos, time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "INSERT INTO "+signal+" (changefeed, at) VALUES (?, 0)", name); err != nil {
		return 0, fmt.Errorf("ask the changefeed's reader for the position of the read (the user needs INSERT and DELETE on %s.%s): %w", r.cfg.Database, signalTable, explain(r.cfg, err))
	}
	defer db.ExecContext(context.Background(), "DELETE FROM "+signal+" WHERE changefeed = ?", name) //nolint:errcheck // a leftover row is harmless
	deadline := time.Now().Add(r.CutTimeout)
	for {
		var at int64
		if err := db.QueryRowContext(ctx, "SELECT at FROM "+signal+" WHERE changefeed = ?", name).Scan(&at); err != nil {
			return 0, explain(r.cfg, err)
		}
		switch {
		case at > 0:
			return model.Ts(at), nil
		case at < 0:
			return 0, errCutTooOld
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the changefeed's binary log reader did not say where the read of %s stands within %s: verify needs the changefeed running and its reader streaming ('cdcctl changefeed get' says how it is)", r.cfg.Addr(), r.CutTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
