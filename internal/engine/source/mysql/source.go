package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Pin checks the server for a new changefeed (Preflight), fixes its
// start, and the server id its binary log connection registers under, in
// the URI, and returns the URI to store and the reader's first resume
// point: where the binary log ends now.
func Pin(ctx context.Context, uri string, cf model.ChangefeedID, now time.Time) (string, source.Position, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return "", nil, err
	}
	if len(cfg.Filter) > 0 && len(cfg.Tables) == 0 {
		f, err := matchRules(ctx, cfg)
		if err != nil {
			return "", nil, err
		}
		if len(f.Tables) == 0 {
			return "", nil, fmt.Errorf("the table rules %s match no table that can be replicated (%s): check them (a rule is database.table with * and ?; ! excludes)", strings.Join(cfg.Filter, ","), orNone(f.Refused))
		}
		cfg.Tables = f.Tables
	}
	srv, _, err := Preflight(ctx, cfg)
	if err != nil {
		return "", nil, err
	}
	if cfg.ServerID == 0 {
		cfg.ServerID = derivedServerID(cf)
	}
	if cfg.ServerID == srv.ServerID {
		return "", nil, fmt.Errorf("source URI: server-id=%d is the server's own server_id: give the changefeed another (server-id=N, an id no server or replica uses)", cfg.ServerID)
	}
	cfg.Start = model.TsFromTime(now)
	pos, err := Begin(ctx, cfg, cfg.Start)
	if err != nil {
		return "", nil, err
	}
	return cfg.URI(), pos, nil
}

// derivedServerID is a changefeed's server id when its URI gives none:
// from its name, away from the small ids servers use.
func derivedServerID(cf model.ChangefeedID) uint32 {
	h := fnv.New32a()
	h.Write([]byte(cf))
	return 1_000_000 + h.Sum32()%1_000_000_000
}

// Claims are what a changefeed of this URI holds upstream, named so that
// two changefeeds' claims are equal when they would share it: the server
// id its binary log connection registers under on that server (derived
// from the changefeed's name unless the URI gives one). Two readers of
// one id take the connection from each other.
func Claims(uri string, changefeed string) []string {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil
	}
	id := cfg.ServerID
	if id == 0 {
		id = derivedServerID(model.ChangefeedID(changefeed))
	}
	return []string{fmt.Sprintf("server-id %d on %s:%d", id, strings.ToLower(cfg.Host), cfg.Port)}
}

// Named is a new changefeed's source URI as a create records it before
// it pins (RemoveURI then forgets what the create wrote): without a
// start= copied from another changefeed's URI, whose signal rows it
// would name.
func Named(uri string, _ model.ChangefeedID) (string, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return "", err
	}
	cfg.Start = 0
	return cfg.URI(), nil
}

// RemoveURI forgets a removed changefeed upstream: its row of the signal
// table. The server keeps nothing else for it (binary logs are kept by
// time, not for readers).
func RemoveURI(ctx context.Context, uri string) error {
	cfg, err := ParseURI(uri)
	if err != nil {
		return err
	}
	db, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "DELETE FROM "+quoteTable(model.TableName(cfg.Database, signalTable))+" WHERE changefeed = ? OR changefeed LIKE ? OR changefeed LIKE ?",
		string(tickName(cfg)), cutPrefix(cfg)+"%", markPrefix(cfg)+"%")
	if err != nil && !strings.Contains(err.Error(), "1146") { // no signal table: nothing to forget
		return explain(cfg, err)
	}
	return nil
}

// Preview checks what a new changefeed would replicate, creating
// nothing.
func Preview(ctx context.Context, uri string) (source.Followed, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return source.Followed{}, err
	}
	if len(cfg.Filter) > 0 {
		f, err := matchRules(ctx, cfg)
		if err != nil {
			return source.Followed{}, err
		}
		if len(f.Tables) == 0 {
			return f, nil
		}
		cfg.Tables = f.Tables
		_, _, err = Preflight(ctx, cfg)
		return f, err
	}
	if _, _, err := Preflight(ctx, cfg); err != nil {
		return source.Followed{}, err
	}
	return source.Followed{Tables: cfg.Tables}, nil
}

// Retable computes, and with apply makes, the change of a stored URI's
// tables to tables (changefeed update; the changefeed is paused, so no
// reader holds the resume point). Added tables are checked as a create
// checks them; the resume point learns their schemas from the catalog,
// starting at at (the changefeed's checkpoint, where their partitions
// start), and forgets the removed ones. The added tables' rows come from
// their partitions' snapshot (snapshot=initial) and the changes after
// at. Nothing upstream changes, so a dry run computes the same.
func Retable(ctx context.Context, uri string, pos source.Position, tables []string, at model.Ts, _ bool, again ...string) (source.Retabled, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return source.Retabled{}, err
	}
	var p position
	if err := source.DecodePosition(pos, &p); err != nil {
		return source.Retabled{}, fmt.Errorf("the changefeed's stored resume point does not decode: %w", err)
	}
	var next []string
	if isRules(tables) {
		// New rules: the tables they match now.
		if cfg.Filter, err = ParseRules(cfg.Database, tables); err != nil {
			return source.Retabled{}, err
		}
		f, err := matchRules(ctx, cfg)
		if err != nil {
			return source.Retabled{}, err
		}
		next = f.Tables
	} else if next, err = ParseTables(cfg.Database, tables); err != nil {
		return source.Retabled{}, err
	}
	if len(next) == 0 {
		return source.Retabled{}, fmt.Errorf("a changefeed needs at least one table; to stop replicating all of them, remove the changefeed")
	}
	added, removed := source.TablesDiff(cfg.Tables, next)
	for _, t := range again {
		if cfg.Snapshot == "never" {
			return source.Retabled{}, fmt.Errorf("table %s cannot be copied again: the changefeed was created with snapshot=never, so nothing would copy it and its rows would be truncated in the sink", t)
		}
		if !slices.Contains(cfg.Tables, t) || !slices.Contains(next, t) {
			return source.Retabled{}, fmt.Errorf("table %s is copied again only as one of the changefeed's tables, before and after the change", t)
		}
	}
	tablesNow := make(map[string]tableState, len(next))
	for _, t := range next {
		if st, ok := p.Tables[t]; ok {
			tablesNow[t] = st
		}
	}
	if len(added)+len(removed)+len(again) == 0 {
		return retabled(cfg, p, tablesNow, next, nil, nil, nil)
	}
	db, err := open(ctx, cfg)
	if err != nil {
		return source.Retabled{}, err
	}
	defer db.Close()
	if fresh := append(slices.Clone(added), again...); len(fresh) > 0 {
		// The tables copied again are read anew, as added ones.
		if err := addTables(ctx, db, cfg, fresh, at, tablesNow); err != nil {
			return source.Retabled{}, err
		}
	}
	// Removed tables that are gone upstream (dropped, or renamed: the
	// name ends) are told to the sink as a DROP TABLE, as PostgreSQL's
	// are: the reader may not have passed its own DROP before the pause
	// (written twice, it says the same), unless the resume point is past
	// it.
	var ended map[string]source.EndedTable
	for _, t := range removed {
		st, known := p.Tables[t]
		if !known || st.Def == nil {
			continue
		}
		if st.Dropped {
			// Dropped at or below the resume point (the checkpoint): every
			// partition of it passed its DROP TABLE, which is in the sink;
			// written again now, below the checkpoint, it would come
			// after what the sink has already said is complete.
			continue
		}
		kind, err := tableKind(ctx, db, t)
		if err != nil {
			return source.Retabled{}, explain(cfg, err)
		}
		if kind != "" {
			continue // still there: it only leaves the changefeed
		}
		if ended == nil {
			ended = map[string]source.EndedTable{}
		}
		ended[t] = source.EndedTable{Def: st.Def}
	}
	out, err := retabled(cfg, p, tablesNow, next, added, removed, ended)
	out.Again = again
	return out, err
}

// retabled is Retable's answer: the URI and resume point with the
// tables after the change.
func retabled(cfg Config, p position, tables map[string]tableState, next, added, removed []string, ended map[string]source.EndedTable) (source.Retabled, error) {
	p.Tables = tables
	b, err := source.EncodePosition(p)
	if err != nil {
		return source.Retabled{}, err
	}
	cfg.Tables = next
	return source.Retabled{URI: cfg.URI(), Position: b, Tables: next, Added: added, Removed: removed, Rules: cfg.Filter, Ended: ended}, nil
}

// Source is a MySQL changefeed's source: dispatchers read its event log
// (the embedded source.LogSource), and the node maintaining the
// changefeed runs its puller, which fills the log from the binary log.
type Source struct {
	*source.LogSource
	*Puller
	cfg   Config
	slots source.ChunkSlots // the initial snapshot's chunks held on this node
	pace  *source.Pace      // and its rate there (snapshot-rate=)

	dbMu sync.Mutex
	db   *sql.DB // the initial snapshot's connections (snapshotDB)

	// A character key's spans whose filtered chunks ran past their
	// budget, and when (filterbudget.go); the server's flavor.
	filterBudget time.Duration
	sparseMu     sync.Mutex
	sparseAt     map[string]time.Time
	flavor       string
}

// Open opens a stored (pinned) URI.
func Open(uri string, env source.Env) (*Source, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	if cfg.Start == 0 || cfg.ServerID == 0 {
		return nil, fmt.Errorf("source URI %s: not a changefeed's stored URI (start and server-id are set when it is created)", Redact(uri))
	}
	return &Source{LogSource: source.NewLogSource(env, cfg.Tables, cfg.Start), Puller: NewPuller(cfg, env.Changefeed, "", env.Log), cfg: cfg, pace: source.NewPace(cfg.SnapshotRate), filterBudget: defaultFilterBudget}, nil
}

// Close implements source.Source.
func (s *Source) Close() error {
	s.dbMu.Lock()
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
	s.dbMu.Unlock()
	return s.LogSource.Close()
}

// TableKey implements source.KeyTyped, from the catalog, on the
// source's pool: a changefeed's create and a re-snapshot ask it of every
// table, which opened a connection each.
func (s *Source) TableKey(ctx context.Context, table string) (types, columns string, err error) {
	db, err := s.snapshotDB(ctx)
	if err != nil {
		return "", "", err
	}
	def, _, err := tableDef(ctx, db, table)
	if err != nil {
		return "", "", err
	}
	return keyTypes(def), model.KeyColumns(def.KeyNames()), nil
}

// keyTypes names a table's key column types as routing encodes them
// (model.EncodeKeyValues): integers that fit 64 bits signed are "int8"
// (numeric order); a column of bytes (BINARY, VARBINARY, BLOB, BIT) is
// "bytes" (byte order, encoded as UTF-8 so that bounds and copy progress
// survive JSON: model.BytesKeyType); every other type, BIGINT UNSIGNED
// included, is routed by its text ("text": byte order, which is not the
// column's collation; ranges still cover every key once).
func keyTypes(def *source.TableDef) string {
	names := def.KeyNames()
	if len(names) == 0 {
		return model.NoKey
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = keyType(def.Columns[def.Index(n)].Type)
	}
	return strings.Join(out, ",")
}

func keyType(colType string) string {
	if binaryType(colType) {
		return model.BytesKeyType
	}
	t := strings.ToLower(colType)
	base, _, _ := strings.Cut(t, "(")
	base, _, _ = strings.Cut(base, " ")
	switch base {
	case "tinyint", "smallint", "mediumint", "int", "integer":
		return "int8"
	case "bigint":
		if !strings.Contains(t, "unsigned") {
			return "int8"
		}
	}
	return "text"
}

// quoteIdent quotes a column name as MySQL does.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// logger is the source's logger, or one that drops everything.
func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
