package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Puller reads one changefeed's tables from the binary log into its
// event log (source.Puller).
type Puller struct {
	cfg    Config
	cf     model.ChangefeedID
	flavor string
	log    *slog.Logger

	// answers are the cuts verify asked for, answered by the tick
	// writer (cut.go).
	answers chan cutAnswer

	mu sync.Mutex
	// points are the last maxPoints/2 to maxPoints transaction ends
	// passed, oldest first, each one: a verify's cut finds the exact
	// transaction a read's point follows (cut.go). resumes are resume
	// points for checkpoints, thinned rather than cut (thinned), and
	// dropped below the checkpoint as it passes them.
	points, resumes []position
	issues          []source.TableIssue
}

// NewPuller returns the puller of changefeed cf; flavor is "mariadb" or
// "mysql" (Preflight's Server.Flavor).
func NewPuller(cfg Config, cf model.ChangefeedID, flavor string, log *slog.Logger) *Puller {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ServerID == 0 {
		cfg.ServerID = derivedServerID(cf)
	}
	return &Puller{cfg: cfg, cf: cf, flavor: flavor, log: log, answers: make(chan cutAnswer, 16)}
}

// Pull implements source.Puller: it reads the binary log from a resume
// point into w until ctx ends or the server fails.
func (p *Puller) Pull(ctx context.Context, from source.Position, w source.LogWriter) error {
	c, err := p.connect(ctx, from)
	if err != nil {
		return err
	}
	defer c.syncer.Close()
	at, srv, passed, stream := c.at, c.srv, c.passed, c.stream
	p.mu.Lock()
	p.points, p.resumes = []position{at}, []position{at}
	p.issues = nil // this run finds them again
	p.mu.Unlock()
	for t, st := range at.Tables {
		if st.Dropped {
			p.reportDropped(t, cmp.Or(st.DroppedAt, at.Ts))
		}
	}

	tctx, stopTicks := context.WithCancel(ctx)
	var ticking sync.WaitGroup
	ticking.Add(1)
	go func() {
		defer ticking.Done()
		p.tick(tctx)
	}()
	defer func() {
		stopTicks()
		ticking.Wait()
	}()

	cols := map[string][]column{}
	keyTypesByTable := map[string]string{}
	keyTypesOf := func(table string) string {
		if k, ok := keyTypesByTable[table]; ok {
			return k
		}
		k := keyTypes(at.Tables[table].Def)
		keyTypesByTable[table] = k
		return k
	}
	columnsOf := func(table string) []column {
		if c, ok := cols[table]; ok {
			return c
		}
		st := at.Tables[table]
		c := make([]column, len(st.Def.Columns))
		for i, cd := range st.Def.Columns {
			c[i] = parseColumn(cd.Type)
			c[i].charset = st.Charsets[i]
		}
		cols[table] = c
		return c
	}
	var markDB *sql.DB // marks of tables to copy again (again.go)
	defer func() {
		if markDB != nil {
			markDB.Close()
		}
	}()
	signal := model.TableName(p.cfg.Database, signalTable)
	pending := map[string]string{} // tables an ALTER named since: its statement
	for t, st := range at.Tables {
		if st.Unfollowed != "" {
			pending[t] = st.Unfollowed // before this reader started
		}
	}
	checkedMap := map[string]*replication.TableMapEvent{} // the last table map found to match, by table
	var catalog *sql.DB                                   // read when a schema changes
	named := func(t string) string { return namedIn(at.Tables, t, srv.FoldsNames) }
	sameDB := func(a, b string) bool { return a == b || srv.FoldsNames && strings.EqualFold(a, b) }
	openCatalog := func() (*sql.DB, error) {
		var err error
		if catalog == nil {
			catalog, err = open(ctx, p.cfg)
		}
		return catalog, err
	}
	h := &holder{p: p, w: w, at: &at, held: map[string]bool{}, catalog: openCatalog}
	held, hold := h.held, h.hold
	defer func() {
		if catalog != nil {
			catalog.Close()
		}
	}()
	var cur txn
	// carried are schema changes of prepared XA transactions, for the
	// next transaction that commits.
	var carried []*source.Event
	file := at.File
	// Tables added at a point ahead (added.go): their transactions up to
	// it are in their copies.
	adding := addedAhead(at.Tables)
	inCopy := func(st tableState) bool {
		return st.AddedAt.covers(p.flavor, srv.ServerID, cur.file, cur.pos, cur.gtid)
	}
	pastAdded := func(st tableState) bool { return st.AddedAt.passedOnItsServer(srv.ServerID, cur.file, inCopy(st)) }
	events := &binlogEvents{stream: stream}
	// Prepared XA transactions, by id: their rows wait for their XA
	// COMMIT, written later in a group of its own (or are dropped at
	// their XA ROLLBACK). While one waits no resume point is kept, so a
	// reader started again reads its prepare again (xa.go).
	prepared := map[string]txn{}
	// spare is the last appended transaction's array of events, for the
	// next one's (the log copies what it keeps): a transaction's events
	// grown from nothing were a twentieth of a streaming run's CPU.
	var spare []source.Event
	checksummed := false // the log's events end in a CRC32 (its format description says)
	for {
		ev, err := events.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return p.explainStream(err, at)
		}
		if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
			// The end of an XA transaction's prepare: nothing commits.
			if cur.base != 0 {
				// Its rows went to the log in parts, to become visible at
				// the next commit: a transaction not known for XA before
				// its rows. Read again by a new reader (a new log).
				return fmt.Errorf("mysql source: an XA transaction's rows were written to the event log in parts before it was known for one (at %s:%d); the reader starts again", file, ev.Header.LogPos)
			}
			if cur.xa != "" {
				// A schema change met at its first row happened whatever
				// its outcome, and the table's schema moved on with it:
				// the next transaction to commit writes it, before rows
				// of its own that carry it (one may commit in between).
				carried = append(carried, cur.ddls...)
				cur.ddls = nil
				prepared[cur.xa] = cur
			}
			cur = txn{}
			continue
		}
		switch e := ev.Event.(type) {
		case *replication.FormatDescriptionEvent:
			checksummed = e.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
			continue
		case *replication.ExecuteLoadQueryEvent:
			// A LOAD DATA logged as a statement: its rows are in the
			// file the server logged before it, not in rows events.
			if q, db, ok := loadQuery(ev.RawData, e, checksummed); ok {
				cur.rowStmts = append(cur.rowStmts, [2]string{q, db})
			}
			continue
		case *replication.RotateEvent:
			file = string(e.NextLogName)
			continue
		case *replication.GTIDEvent:
			// The primary's commit time (original), not this server's
			// (immediate, a replica's own apply time): positions mean the
			// same after a failover to a replica, and nothing is written
			// twice under a later one. Zero before MySQL 8.0.1.
			cur = txn{commit: int64(cmp.Or(e.OriginalCommitTimestamp, e.ImmediateCommitTimestamp)), gtid: gtidOf(ev), began: ev.Header.Timestamp, file: file, pos: ev.Header.LogPos, events: spare}
			spare = nil
			if passed != nil {
				passed.add(ev)
			}
			at.Tables, adding = passAdded(at.Tables, adding, pastAdded)
		case *replication.MariadbGTIDEvent:
			cur = txn{gtid: gtidOf(ev), began: ev.Header.Timestamp, xaStart: e.Flags&mariadbPreparedXA != 0, file: file, pos: ev.Header.LogPos, events: spare}
			spare = nil
			if passed != nil {
				passed.add(ev)
			}
			at.Tables, adding = passAdded(at.Tables, adding, pastAdded)
		case *replication.RowsEvent:
			if cur.before == nil {
				cur.before = at.Tables
			}
			table := model.TableName(string(e.Table.Schema), string(e.Table.Table))
			if table == signal {
				cur.tickAt = max(cur.tickAt, tickOf(e, tickName(p.cfg)))
				if isInsert(ev.Header.EventType) {
					// A cut request is an insert; its answer, an
					// update, is not asked again. A snapshot's
					// watermark is an insert too (snapshot.go).
					p.answerCuts(e)
					cur.events = append(cur.events, p.marksIn(e, at.Tables, held)...)
				}
				break
			}
			st, ok := at.Tables[table]
			if !ok || held[table] || st.Dropped || inCopy(st) {
				break
			}
			// A table map comes once per transaction and table: checked
			// once, not at every rows event under it.
			stmt, altered := pending[table]
			if altered || checkedMap[table] != e.Table && !mapMatches(e.Table, st.Def) {
				delete(pending, table)
				if _, err := openCatalog(); err != nil {
					return err
				}
				next, ddl, why, err := followSchema(ctx, catalog, table, st, e.Table, stmt)
				if err != nil {
					return fmt.Errorf("mysql source: table %s: %w; the reader starts again", table, err)
				}
				if why != "" {
					h.toCopy(ctx, table, why)
					break
				}
				next.Unfollowed = ""
				if ddl != nil {
					if cur.slotsFull() {
						h.toCopy(ctx, table, fmt.Sprintf("its schema changed within a transaction that changed more than %d tables whose schemas changed", ddlSlots))
						break
					}
					cur.ddls = append(cur.ddls, ddl)
					at.Tables = withTable(at.Tables, table, next)
					st = next
					delete(cols, table)
					delete(keyTypesByTable, table)
				} else if next.DefaultCharset != st.DefaultCharset || st.Unfollowed != "" {
					at.Tables = withTable(at.Tables, table, next)
					st = next
				}
			}
			checkedMap[table] = e.Table
			evs, err := rowEvents(cur.events, e, ev.Header.EventType, table, st, columnsOf(table), keyTypesOf(table))
			if err != nil {
				hold(table, "a row does not decode: "+err.Error())
				break
			}
			cur.events = evs
			cur.size += int(ev.Header.EventSize)
			if cur.partDue() {
				if err := cur.part(&at, held, ev.Header.Timestamp, w, inCopy); err != nil {
					return err
				}
			}
		case *replication.QueryEvent:
			if cur.before == nil {
				cur.before = at.Tables
			}
			q := strings.TrimSpace(string(e.Query))
			verb, xid := xaStatement(q)
			switch {
			case inTransaction(q), verb == "START":
				cur.xaStart = cur.xaStart || verb == "START"
				continue
			case verb == "END":
				// Its prepare follows, or (MySQL) its one-phase commit.
				cur.xa = xid
				continue
			case verb == "COMMIT" || verb == "ROLLBACK":
				if pending, ok := prepared[xid]; ok {
					delete(prepared, xid)
					if verb == "COMMIT" {
						cur.events = append(cur.events, pending.events...)
					}
				} else if verb == "COMMIT" && len(cur.events) == 0 && !strings.HasSuffix(strings.ToUpper(q), " ONE PHASE") {
					// (A one-phase commit was never prepared: one of no
					// replicated table's has no rows here, rightly.)
					p.log.Warn("mysql source: an XA transaction prepared before the position this reader started from commits here; its rows were written before that position and are not read (create changefeeds while no XA transaction is prepared: XA RECOVER lists them)",
						"changefeed", p.cf, "xid", xid)
				}
			case strings.EqualFold(q, "COMMIT"):
			case rowsStatement(q):
				// Part of its transaction; the tables it wrote are held
				// at the commit.
				cur.rowStmts = append(cur.rowStmts, [2]string{q, string(e.Schema)})
				continue
			default:
				// A schema change, its own transaction: dealt with at its
				// commit (below), where its position is known.
				cur.stmt, cur.stmtDB = q, string(e.Schema)
			}
		case *replication.XIDEvent:
		default:
			continue
		}
		if !commits(ev) {
			continue
		}
		if len(carried) > 0 && cur.base == 0 {
			cur.ddls = append(carried, cur.ddls...)
			carried = nil
		}
		if cur.commit == 0 {
			cur.commit = int64(ev.Header.Timestamp) * 1_000_000
		}
		ts := max(at.Ts+1, model.TsFromMicros(max(cur.commit, cur.tickAt)))
		if cur.base != 0 {
			ts = cur.base // fixed at its first part
		}
		// A statement at or before where a table joined the changefeed
		// (its Since; a table added, where the binary log ended then)
		// is history the table's schema and copy already hold.
		joined := func(t string) bool { st, ok := at.Tables[t]; return ok && ts > st.Since && !inCopy(st) }
		for _, rs := range cur.rowStmts {
			for _, t := range writtenTables(rs[0], rs[1], at.Tables) {
				if t = named(t); joined(t) && !held[t] && !at.Tables[t].Dropped {
					hold(t, rowsReason(rs[0]))
				}
			}
		}
		if cur.stmt != "" {
			q := withoutComments(cur.stmt)
			switch {
			default:
				// A schema change (its own transaction). An ALTER is
				// followed at the table's next row (schema.go); a
				// TRUNCATE goes to the sink as one (a new table version
				// that no row before survives), and a DROP TABLE too (the
				// table ends; one created again under its name is
				// another); a rename holds the table, never decoded with
				// a schema that no longer holds.
				if t, ok := truncated(q, cur.stmtDB); ok {
					t = named(t)
					if st, replicated := at.Tables[t]; replicated {
						if !held[t] && joined(t) {
							st.Version++
							at.Tables = withTable(at.Tables, t, st)
							cur.ddls = append(cur.ddls, &source.Event{Kind: source.KindDDL, Table: t, Def: st.Def, SchemaVersion: st.Version,
								Statement: source.TruncatePrefix + quoteTable(t)})
						}
						break
					}
					// Another table, or one named otherwise than ours
					// (letter case): what it names is held below.
				}
				names, ok := droppedTables(q, cur.stmtDB)
				for i := range names {
					names[i] = named(names[i])
				}
				if d, dropsDB := droppedDatabase(q); dropsDB {
					// Every replicated table in it ends, as one
					// dropped by name does.
					for _, t := range slices.Sorted(maps.Keys(at.Tables)) {
						if schema, _ := model.SplitTableName(t); sameDB(schema, d) {
							names = append(names, t)
						}
					}
					ok = true
				}
				if ok {
					for _, t := range names {
						st, replicated := at.Tables[t]
						if !replicated || st.Dropped || held[t] || !joined(t) {
							continue
						}
						st.Version++
						st.Dropped, st.DroppedAt = true, ts
						at.Tables = withTable(at.Tables, t, st)
						cur.ddls = append(cur.ddls, &source.Event{Kind: source.KindDDL, Table: t, Def: st.Def, SchemaVersion: st.Version,
							Statement: source.DropPrefix + quoteTable(t)})
						p.reportDropped(t, ts)
						p.log.Warn("mysql source: a replicated table was dropped upstream; it ends, the others go on", "changefeed", p.cf, "table", t)
					}
					break
				}
				if pairs, ok := renamedTables(q, cur.stmtDB); ok {
					for i := range pairs {
						pairs[i] = [2]string{named(pairs[i][0]), named(pairs[i][1])}
					}
					if t, shadow, ok := cutOver(pairs, at.Tables); ok && joined(t) && !held[t] {
						// An online schema change's swap: the table goes
						// on with its shadow's ALTERs applied.
						p.cutOver(ctx, t, shadow, q, shadowAlters(at.Tables[t]), openCatalog, &cur, &at, hold, pending)
						at.Tables = withShadow(at.Tables, t, nil)
						delete(cols, t)
						delete(keyTypesByTable, t)
						delete(checkedMap, t)
						break
					}
					// A table renamed is held (its rows go on under a
					// name that is not its); one renamed to a replicated
					// table's name comes into being, as a CREATE does.
					for _, pr := range pairs {
						if st, replicated := at.Tables[pr[0]]; replicated && joined(pr[0]) && !held[pr[0]] && !st.Dropped {
							h.renamed(ctx, pr[0], pr[1], q, slices.ContainsFunc(pairs, func(o [2]string) bool { return o[1] == pr[0] }))
						}
					}
					break
				}
				if t, replaces, temporary, ok := createdTable(q, cur.stmtDB); ok {
					t = named(t)
					if x := shadowOf(t, at.Tables); x != "" && joined(x) {
						// A new migration of x begins.
						at.Tables = withShadow(at.Tables, x, []string{q})
					}
					// A CREATE TABLE changes no table but the one it
					// creates; the others it names (LIKE, a SELECT) are
					// only read. One of ours is a table added to the
					// changefeed after it was created, at a checkpoint
					// before this statement (a pause, or the table
					// rules meeting it at once): its definition is the
					// catalog's at the addition, its rows come from its
					// copy and the stream, so nothing is to follow. A
					// replacement of one of ours is a new table under
					// its name, held as a rename would be.
					if st, replicated := at.Tables[t]; replicated && replaces && !temporary && joined(t) && !held[t] && !st.Dropped {
						h.toCopy(ctx, t, "replaced upstream ("+q+")")
					}
					break
				}
				if changesNoTable(q) {
					// A kind of statement that cannot change a
					// table's columns or name (a view, a grant,
					// OPTIMIZE TABLE, …): what it names goes on.
					break
				}
				if a, _ := parseAlter(q, cur.stmtDB); a.table != "" {
					a.table = named(a.table)
					// (A shadow replicated itself, which table rules
					// may have added, follows its own ALTERs; the swap
					// then follows the table by the catalog.)
					if x := shadowOf(a.table, at.Tables); x != "" && joined(x) && !hasTable(at.Tables, a.table) {
						if sh := at.Tables[x].Shadow; len(sh) > 0 {
							// (Without its CREATE, the reader began
							// after the migration did: not all its ALTERs
							// are known, the swap follows the catalog.)
							at.Tables = withShadow(at.Tables, x, append(slices.Clone(sh), q))
						}
						break
					}
				}
				if why := bringsRowsIn(q); why != "" {
					// Rows came in with no row event: the sink lacks
					// them. Each replicated table it names (the one
					// altered, the one exchanged with) is held, to be
					// copied again.
					for _, t := range namedTables(q, cur.stmtDB, at.Tables) {
						if joined(t) && !held[t] && !at.Tables[t].Dropped {
							h.toCopy(ctx, t, why)
						}
					}
					break
				}
				alter, parsed := parseAlter(q, cur.stmtDB)
				alter.table = named(alter.table)
				for _, t := range namedTables(q, cur.stmtDB, at.Tables) {
					if !joined(t) {
						continue
					}
					if parsed && !held[t] && !at.Tables[t].Dropped {
						if !strings.EqualFold(alter.table, t) {
							continue // another table's, naming this one in passing
						}
						if _, stale := pending[t]; alter.table == t && !stale {
							// (After a statement it did not follow the
							// definition it holds is stale: applied to it
							// this one would be wrong too.)
							// The schema history: applied here, at the
							// statement's position (history.go).
							next, ddl, why, ok := followAlter(ctx, openCatalog, t, at.Tables[t], alter, q, p.flavor)
							if why != "" && alter.renamedTo != "" {
								h.renamed(ctx, t, named(alter.renamedTo), q, false)
								continue
							}
							if why != "" {
								h.toCopy(ctx, t, why)
								continue
							}
							if ok {
								delete(pending, t)
								if ddl != nil {
									cur.ddls = append(cur.ddls, ddl)
									at.Tables = withTable(at.Tables, t, next)
									delete(cols, t)
									delete(keyTypesByTable, t)
									delete(checkedMap, t)
								} else if next.DefaultCharset != at.Tables[t].DefaultCharset {
									at.Tables = withTable(at.Tables, t, next)
								}
								continue
							}
						}
					}
					if followable(q) {
						markUnfollowed(pending, &at, t, q)
						continue
					}
					if !held[t] && !at.Tables[t].Dropped {
						h.toCopy(ctx, t, "renamed or changed upstream by a statement the reader does not follow ("+q+")")
					}
				}
			}
		}
		if cur.base == 0 { // a parted transaction's were made at its first part
			var reset []*source.Event
			if at.Tables, reset = resets(at.Tables, held, ts, inCopy); len(reset) > 0 {
				cur.ddls = append(reset, cur.ddls...)
			}
		}
		// Each schema change at its own position, then the rows: a
		// table's rows after its change carry the change's position as
		// their table version.
		ts = cur.settle(&at, ts)
		if again := cur.copiesAgain(at.Tables); len(again) > 0 {
			if err := p.markAgain(ctx, &markDB, again, at.Tables); err != nil {
				return err
			}
		}
		out := cur.events // most transactions change rows only: not copied
		if len(cur.ddls) > 0 {
			out = make([]source.Event, 0, len(cur.ddls)+len(cur.events))
			for _, d := range cur.ddls {
				out = append(out, *d)
			}
			out = append(out, cur.events...)
		}
		if cur.base != 0 || hasRows(cur.events) {
			// Its id here, for a log that keeps transaction boundaries:
			// its GTID, else where it commits in the binary log.
			id := cur.gtid
			if id == "" {
				id = file + ":" + strconv.FormatUint(uint64(ev.Header.LogPos), 10)
			}
			out = append(out, source.Event{Kind: source.KindTxn, CommitTs: ts, Txn: &source.TxnSummary{SourceID: id}})
		}
		if len(out) > 0 {
			if err := w.Append(out); err != nil {
				return err
			}
			if cap(out) <= maxSpare {
				clear(out)
				spare = out[:0]
			}
		} else {
			w.Resolve(ts)
		}
		at = position{File: file, Pos: ev.Header.LogPos, GTID: passed.String(), Server: srv.ServerID, Ts: ts, Tables: at.Tables}
		if len(prepared) == 0 {
			p.mu.Lock()
			p.points = append(p.points, at)
			if len(p.points) > maxPoints {
				p.points = append(p.points[:0], p.points[len(p.points)-maxPoints/2:]...)
			}
			p.resumes = thinned(append(p.resumes, at))
			p.mu.Unlock()
		}
		cur = txn{}
	}
}

// Confirm implements source.Puller: the server keeps its binary logs by
// time, not for a reader, so there is nothing to release.
func (p *Puller) Confirm(source.Position) {}
