package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Pin prepares the upstream of a new changefeed (checks, publication,
// slot) and fixes its start; it returns the URI to store with the
// changefeed and the puller's first resume point.
func Pin(ctx context.Context, uri string, cf model.ChangefeedID, now time.Time) (string, source.Position, error) {
	// A start= the operator copied from another changefeed's stored URI
	// is not this one's (it is fixed below), and would make the URI read
	// as one stored before the sessions' settings were fixed.
	if u, err := url.Parse(uri); err == nil && u.Query().Has("start") {
		q := u.Query()
		q.Del("start")
		u.RawQuery = q.Encode()
		uri = u.String()
	}
	cfg, err := ParseURI(uri)
	if err != nil {
		return "", nil, err
	}
	cfg = cfg.WithNames(string(cf))
	if len(cfg.Filter) > 0 {
		f, err := follow(ctx, cfg, nil)
		if err != nil {
			return "", nil, err
		}
		if len(f.Refused) > 0 {
			return "", nil, fmt.Errorf("the table rules match tables that cannot be replicated:\n  %s", strings.Join(f.Refused, "\n  "))
		}
		if len(f.Tables) == 0 {
			return "", nil, fmt.Errorf("the table rules %s match no table in the database: check them (a rule is schema.table with * and ?; ! excludes)", strings.Join(cfg.Filter, ","))
		}
		cfg.Tables = f.Tables
	}
	up, err := Prepare(ctx, cfg)
	if err != nil {
		return "", nil, err
	}
	cfg.Start = model.TsFromTime(now)
	p := position{LSN: up.StartLSN.String(), Ts: cfg.Start, Tables: map[string]TableState{}, Parts: up.Parts, PartsKnown: up.Parts != nil, Labels: kept(up.Labels), LabelsAt: up.LabelsAt}
	// Its cluster and timeline now, not at its reader's first start: a
	// failover in between is then found (resumeChecks). Not known (a
	// replication connection refused here), the reader's start fills
	// them in, as for a resume point written before they were kept.
	if id, err := identify(ctx, cfg); err == nil {
		p.System, p.Timeline = id.SystemID, id.Timeline
	}
	for t, def := range up.Defs {
		p.Tables[t] = TableState{Def: def, Since: cfg.Start, OID: up.OIDs[t], Nums: up.Nums[t]}
	}
	b, err := source.EncodePosition(p)
	if err != nil {
		return "", nil, err
	}
	return cfg.URI(), b, nil
}

// Named is a new changefeed's source URI with the slot and publication
// Pin will hold named (RemoveURI releases them): what a create records
// before it pins, so that a create that never finishes is released.
// Nothing ("") for a slot the operator named (slot=): Pin may find it
// rather than make it, in use by another reader, and a cleanup of a
// create that failed would drop it.
func Named(uri string, cf model.ChangefeedID) (string, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return "", err
	}
	if cfg.Slot != "" {
		return "", nil
	}
	cfg.Start = 0
	return cfg.WithNames(string(cf)).URI(), nil
}

// RemoveURI drops what Pin created for a stored URI.
func RemoveURI(ctx context.Context, uri string) error {
	cfg, err := ParseURI(uri)
	if err != nil {
		return err
	}
	return Remove(ctx, cfg)
}

// Source is a PostgreSQL changefeed's source: dispatchers read its event
// log (the embedded source.LogSource), and the node maintaining the
// changefeed runs its puller, which fills the log from the slot.
type Source struct {
	*source.LogSource
	cfg   Config
	log   *slog.Logger
	pool  *copyPool         // the initial snapshot's connections on this node
	slots source.ChunkSlots // and the chunks it holds
	pace  *source.Pace      // and its snapshot's rate (snapshot-rate=)
	// sortsTold holds the tables whose sorted chunks were warned of
	// (copy.go), once each.
	sortsTold sync.Map

	// missed counts transactions a chunk's read did not see though they
	// committed before its low watermark (visible.go).
	missed atomic.Int64

	cf model.ChangefeedID
	// dropEvery is how often Pull looks for tables dropped upstream
	// (catalog-interval=, dropCheckEvery by default; a test shortens
	// its own source's).
	dropEvery time.Duration

	mu     sync.Mutex
	stream *Stream              // while Pull runs
	points []position           // resume points passed, oldest first
	kept   source.PositionCache // the resume points encoded
	issues issues               // of the current run (holds.go)
	// labels are the enums' labels as the reader's last look read them,
	// by value (relabel.go): nil before its first.
	labels   map[uint32]enumLabel
	labelsAt int64 // the database's clock when they were read
	// rewritesWarned: the reader said once that the changefeed has no
	// event trigger (rewrites.go).
	rewritesWarned bool
}

// Open opens a stored (pinned) URI.
func Open(uri string, env source.Env) (*Source, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	if cfg.Slot == "" || cfg.Publication == "" || cfg.Start == 0 {
		return nil, fmt.Errorf("source URI %s: not a changefeed's stored URI (slot, publication and start are set when it is created)", Redact(uri))
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := dropCheckEvery
	if cfg.CatalogInterval != 0 {
		every = cfg.CatalogInterval
	}
	return &Source{LogSource: source.NewLogSource(env, cfg.Tables, cfg.Start), cfg: cfg, log: log, pool: &copyPool{cfg: cfg}, pace: source.NewPace(cfg.SnapshotRate), cf: env.Changefeed, dropEvery: every}, nil
}

// Close implements source.Source: the snapshot's idle connections close.
func (s *Source) Close() error {
	s.pool.close()
	return s.LogSource.Close()
}

// TableKey implements source.KeyTyped, from the catalog.
func (s *Source) TableKey(ctx context.Context, table string) (types, columns string, err error) {
	cat, err := openCatalog(ctx, s.cfg.ConnString)
	if err != nil {
		return "", "", explain(s.cfg, err)
	}
	defer cat.Close()
	def, err := cat.tableDef(ctx, table)
	if err != nil {
		return "", "", err
	}
	return keyTypes(def), model.KeyColumns(def.KeyNames()), nil
}

// Pull implements source.Puller.
func (s *Source) Pull(ctx context.Context, from source.Position, w source.LogWriter) error {
	var p position
	if err := source.DecodePosition(from, &p); err != nil {
		return fmt.Errorf("postgres source: the stored resume point does not decode: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(p.LSN)
	if err != nil {
		return fmt.Errorf("postgres source: resume point: %w", err)
	}
	// What an earlier run found is not this run's: a resume cleared it,
	// or this run finds it again where it reads.
	s.mu.Lock()
	s.issues = issues{}
	s.mu.Unlock()
	cfg := s.cfg
	cfg.timeline = p.Timeline
	st, err := OpenStream(ctx, cfg, lsn, p.Ts, p.Tables, s.cfg.Snapshot != "never", p.System)
	if errors.Is(err, errSlotInUse) {
		// This node maintains the changefeed now (the maintainer's
		// placement fences it); a reader that held the slot before was
		// on a node that died or lost its place, and PostgreSQL may not
		// notice for a minute. Take the slot over.
		if terr := terminateHolder(ctx, s.cfg); terr != nil {
			return fmt.Errorf("%w; taking it over failed: %v", err, terr)
		}
		st, err = OpenStream(ctx, cfg, lsn, p.Ts, p.Tables, s.cfg.Snapshot != "never", p.System)
	}
	if err != nil {
		return err
	}
	st.Ignore(p.Gone, p.GoneAt)
	st.cf = string(s.cf)
	// A changefeed made before its triggers were, or by a user made a
	// superuser since, gets them here (rewrites.go); why not is logged
	// once.
	if why := s.ensureRewrites(ctx, st); why != "" && !s.rewritesWarned {
		s.rewritesWarned = true
		s.log.Warn("postgres source: the changefeed's event triggers are not all there, and some changes upstream go unseen (docs/postgres.md)", "changefeed", s.cf, "trigger", rewriteTrigger(s.cfg), "why", why)
	}
	p.System, p.Timeline = st.System, st.Timeline
	for _, t := range st.unresolved {
		st.hold(t, fmt.Sprintf("does not exist under this name: it was renamed or dropped while the changefeed's reader was stopped; if renamed, replicate it under its new name ('cdcctl changefeed pause %s', 'cdcctl changefeed update %s --remove-table %s --add-table NEW', 'cdcctl changefeed resume %s'); if dropped, remove it the same way without --add-table", s.cf, s.cf, t, s.cf))
	}
	s.mu.Lock()
	s.stream, s.points, s.issues = st, []position{p}, issues{}
	s.kept.Forget()
	s.takeLabels(p)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stream, s.issues = nil, issues{}
		s.mu.Unlock()
		_ = st.Close()
	}()
	tables := p.Tables
	order := newCommitOrder()
	checked := time.Now() // the last look for dropped tables
	looks := newLooks(s.cfg, p)
	idle := &idleLook{}
	for {
		it, err := st.Next(ctx)
		if err != nil {
			return err
		}
		// A table held in what Next read is held in the log before any
		// of it is written or resolved.
		for _, h := range st.TakeHolds() {
			w.Hold(h.Table, h.At)
			s.log.Warn("postgres source: a table is held; the others go on", "changefeed", s.cf, "table", h.Table, "at", h.At, "reason", h.Reason)
			s.report(source.TableIssue{Table: h.Table, State: source.TableHeld, At: h.At, Since: time.Now().UTC(), Reason: h.Reason, RenamedTo: h.RenamedTo, CopyAgain: h.CopyAgain})
		}
		if it.Erase != nil {
			for _, t := range it.Erase {
				if err := w.ErasePart(t); err != nil {
					return err
				}
			}
			continue
		}
		if it.Part != nil {
			// Rows of a large transaction, to disk as they arrive.
			if err := w.AppendPart(it.Part); err != nil {
				return err
			}
			continue
		}
		// Every few seconds, whatever comes: under a steady workload
		// transactions resolve the stream, not ticks.
		if time.Since(checked) >= s.dropEvery {
			checked = time.Now()
			if err := s.checkDropped(ctx, st); err != nil {
				return err
			}
			if err := s.checkUnpublished(ctx, st); err != nil {
				return err
			}
			s.lookForAttached(ctx, st, looks)
			s.lookForIdleChanges(ctx, st, idle, looks.at)
			s.lookForRelabels(ctx, st)
		}
		if it.Txn == nil {
			looks.read(it.ResolvedLSN)
			parts, partsKnown := looks.parts()
			w.Resolve(it.Resolved)
			// A resolved position is a resume point too: confirming it lets
			// PostgreSQL recycle WAL, and shut down, while no transaction
			// of ours commits (a walsender waits for its client to confirm
			// everything sent before it stops).
			s.mu.Lock()
			s.points = append(s.points, position{LSN: it.ResolvedLSN.String(), Ts: it.Resolved, Tables: tables, Gone: p.Gone, GoneAt: p.GoneAt, Parts: parts, PartsKnown: partsKnown, System: p.System, Timeline: p.Timeline, Labels: kept(s.labels), LabelsAt: s.labelsAt})
			s.mu.Unlock()
			continue
		}
		tx := it.Txn
		if len(tx.Again) > 0 {
			if err := s.markAgain(ctx, st, tx.Again); err != nil {
				return fmt.Errorf("postgres source: cannot mark a table rewritten by a column's new type to be copied again: %w", explain(s.cfg, err))
			}
		}
		looks.read(tx.EndLSN)
		looks.heard(ownMarks(tx, s.cfg.Slot))
		parts, partsKnown := looks.parts()
		if len(tx.Events) > 0 && tx.Events[0].Kind == source.KindDDL || len(tx.Again) > 0 {
			// (A table copied again may have had its columns' numbers
			// forgotten, with no schema change: a resume point with the
			// old ones copied it again at the next relation message.)
			tables = st.Tables()
		}
		// The snapshot's watermarks go into the log, where the partitions
		// of their table meet them in order with its rows.
		var missed int
		if tx.Marks, missed = order.pass(tx); missed > 0 {
			s.missed.Add(int64(missed))
			s.log.Debug("initial snapshot: a chunk's read missed transactions that committed just before its low watermark; their keys are dropped from it", "transactions", missed)
		}
		tx.Events = append(tx.Events, marksOf(tx, tables)...)
		if tx.Parted || hasRows(tx) {
			// Its id here, for a log that keeps transaction boundaries
			// (Debezium's "xid:LSN").
			tx.Events = append(tx.Events, source.Event{Kind: source.KindTxn, CommitTs: tx.Ts,
				Txn: &source.TxnSummary{SourceID: strconv.FormatUint(uint64(tx.Xid), 10) + ":" + strconv.FormatUint(uint64(tx.CommitLSN), 10)}})
		}
		if len(tx.Events) > 0 {
			if err := w.Append(tx.Events); err != nil {
				return err
			}
		} else {
			// A transaction whose rows all came as parts, or none of ours:
			// its commit makes them readable.
			w.Resolve(tx.Ts)
		}
		s.mu.Lock()
		s.points = append(s.points, position{LSN: tx.EndLSN.String(), Ts: tx.Ts, Tables: tables, Gone: p.Gone, GoneAt: p.GoneAt, Parts: parts, PartsKnown: partsKnown, System: p.System, Timeline: p.Timeline, Labels: kept(s.labels), LabelsAt: s.labelsAt})
		s.mu.Unlock()
	}
}

// marksOf turns a transaction's watermarks into the log's mark events of
// their tables, at its position, each with its table's schema there.
func marksOf(tx *Txn, tables map[string]TableState) []source.Event {
	var out []source.Event
	for _, m := range tx.Marks {
		var mk source.Mark
		if json.Unmarshal(m, &mk) != nil {
			continue
		}
		st, ok := tables[mk.Table]
		if !ok {
			continue // not a table of this changefeed
		}
		out = append(out, source.Event{Kind: source.KindMark, Table: mk.Table, CommitTs: tx.Ts, Def: st.Def,
			SchemaVersion: st.Version, TableVersion: st.Since, Statement: string(m)})
	}
	return out
}

// sampleRows bounds how many keys Boundaries reads to find quantiles: a
// table estimated larger is sampled (TABLESAMPLE SYSTEM) to about this
// many rows.
const sampleRows = 100_000

// rowEstimate is about how many rows a table holds, from the planner's
// statistics: a partitioned root's are its leaves' (it holds none
// itself), and a table never analyzed (-1) is estimated from its size at
// 64 bytes a row, more rows than it likely has, so it is sampled rather
// than read whole.
func rowEstimate(ctx context.Context, cat *catalog, table string) (float64, error) {
	const estimate = `COALESCE(sum(CASE WHEN c.reltuples >= 0 THEN c.reltuples::float8 ELSE pg_relation_size(c.oid) / 64.0 END), 0)`
	var kind string
	if err := cat.conn.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`, quoteQualified(table)).Scan(&kind); err != nil {
		return 0, err
	}
	q := `SELECT ` + estimate + ` FROM pg_class c WHERE c.oid = $1::regclass`
	if kind == "p" {
		// pg_partition_tree is PostgreSQL 12's; a partitioned root is
		// replicated from 13 on.
		q = `SELECT ` + estimate + ` FROM pg_partition_tree($1::regclass) p JOIN pg_class c ON c.oid = p.relid WHERE p.isleaf`
	}
	var n float64
	err := cat.conn.QueryRow(ctx, q, quoteQualified(table)).Scan(&n)
	return n, err
}

// Boundaries implements source.Source: n-1 keys that cut the table's
// current rows into n ranges of about the same number of rows, at the
// quantiles of its keys (all of them for a small table, a block sample
// of a large one). An empty table, or one with fewer keys than ranges,
// is cut less or not at all.
func (s *Source) Boundaries(ctx context.Context, table string, n int) ([]string, error) {
	if n < 2 {
		return nil, nil
	}
	cat, err := openCatalog(ctx, s.cfg.ConnString)
	if err != nil {
		return nil, explain(s.cfg, err)
	}
	defer cat.Close()
	def, err := cat.tableDef(ctx, table)
	if err != nil {
		return nil, err
	}
	if len(def.KeyNames()) == 0 {
		return nil, nil // one partition: no key to cut at
	}
	estimate, err := rowEstimate(ctx, cat, table)
	if err != nil {
		return nil, explain(s.cfg, err)
	}
	keys := def.KeyNames()
	cols := make([]string, len(keys))
	for i, k := range keys {
		cols[i] = outputText(pgx.Identifier{k}.Sanitize())
	}
	from, err := fromTable(ctx, cat.conn, table)
	if err != nil {
		return nil, explain(s.cfg, err)
	}
	q := fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), from)
	if estimate > sampleRows {
		q += fmt.Sprintf(" TABLESAMPLE SYSTEM (%f)", 100*sampleRows/estimate)
	}
	rows, err := cat.conn.Query(ctx, q)
	if err != nil {
		return nil, explain(s.cfg, err)
	}
	types := keyTypes(def)
	var all []string
	for rows.Next() {
		vals := make([]string, len(keys))
		ptrs := make([]any, len(keys))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			rows.Close()
			return nil, err
		}
		enc, err := model.EncodeKeyValues(types, vals)
		if err != nil {
			rows.Close()
			return nil, err
		}
		all = append(all, enc)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, explain(s.cfg, err)
	}
	return source.Quantiles(all, n), nil
}
