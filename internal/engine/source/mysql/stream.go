package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

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
	kept            source.PositionCache // the resume points encoded
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
	p.mu.Lock()
	p.points, p.resumes = []position{c.at}, []position{c.at}
	p.kept.Forget()
	p.issues = nil // this run finds them again
	p.mu.Unlock()
	for t, st := range c.at.Tables {
		if st.Dropped {
			p.reportDropped(t, cmp.Or(st.DroppedAt, c.at.Ts))
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

	r := p.newStreamRun(ctx, c, w)
	defer r.close()
	for {
		ev, err := r.events.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return p.explainStream(err, r.at)
		}
		if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
			// The end of an XA transaction's prepare: nothing commits.
			if err := r.xaPrepare(ev); err != nil {
				return err
			}
			continue
		}
		switch e := ev.Event.(type) {
		case *replication.FormatDescriptionEvent:
			r.checksummed = e.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
			if e.CreateTimestamp != 0 {
				// Written at the server's start: none of its sessions'
				// temporary tables is left (temporary.go).
				clear(r.temps.tables)
			}
			continue
		case *replication.ExecuteLoadQueryEvent:
			// A LOAD DATA logged as a statement: its rows are in the
			// file the server logged before it, not in rows events.
			if q, db, ok := loadQuery(ev.RawData, e, r.checksummed); ok {
				r.cur.rowStmts = append(r.cur.rowStmts, [2]string{q, db})
			}
			continue
		case *replication.RotateEvent:
			r.file = string(e.NextLogName)
			continue
		case *replication.GTIDEvent:
			r.gtid(ev, e)
		case *replication.GtidTaggedLogEvent:
			// MySQL 8.4's uuid:tag:N: a transaction this reader would
			// neither begin nor count as passed, so that a resume by
			// GTID set read it again as new. Refused, not skipped.
			id, _ := uuid.FromBytes(e.SID)
			return fmt.Errorf("mysql source: the binary log has a transaction with a tagged GTID (%s:%s:%d, MySQL 8.4's gtid_next='AUTOMATIC:TAG'), which this reader cannot follow: the changefeed stops here rather than read it again as new after a restart. Have every session write GTIDs without tags (gtid_next AUTOMATIC), then remove the changefeed and create it again", id, e.Tag, e.GNO)
		case *replication.MariadbGTIDEvent:
			r.mariadbGTID(ev, e)
		case *replication.RowsEvent:
			if err := r.rows(ev, e); err != nil {
				return err
			}
		case *replication.QueryEvent:
			if done, err := r.query(ev.Header, e); err != nil {
				return err
			} else if done {
				continue
			}
		case *replication.XIDEvent:
		default:
			continue
		}
		if !commits(ev) {
			continue
		}
		if err := r.commit(ev); err != nil {
			return err
		}
	}
}

// Confirm implements source.Puller: the server keeps its binary logs by
// time, not for a reader, so there is nothing to release.
func (p *Puller) Confirm(source.Position) {}

// streamRun is one Pull's reading of the binary log, event by event:
// where it is, the transaction it is in, and what it keeps between
// transactions. Pull makes it once connected and hands it each event
// (a method for each kind); the commit is in commit.go, the schema
// statement a commit brings in statement.go.
type streamRun struct {
	p   *Puller
	ctx context.Context // Pull's: a run lasts as long as the call
	w   source.LogWriter

	at     position // the last transaction's end (a resume point)
	srv    Server
	passed *gtids // the transactions passed; nil where GTIDs are unknown
	events *binlogEvents
	file   string // the binary log file read

	// A table's decoding, made at its first row since its schema
	// changed (columnsOf, keyTypesOf).
	cols            map[string][]column
	keyTypesByTable map[string]string
	markDB          *sql.DB                               // marks of tables to copy again (again.go)
	temps           temporaries                           // the sessions' temporary tables (temporary.go)
	signal          string                                // the signal table (ticks, cuts, marks)
	pending         map[string]string                     // tables an ALTER named since: its statement
	checkedMap      map[string]*replication.TableMapEvent // the last table map found to match, by table
	catalog         *sql.DB                               // read when a schema changes
	h               *holder
	held            map[string]bool // h's

	cur txn
	// carried are schema changes of prepared XA transactions, for the
	// next transaction that commits.
	carried []*source.Event
	// Tables added at a point ahead (added.go): their transactions up to
	// it are in their copies.
	adding []string
	// Prepared XA transactions, by id: their rows wait for their XA
	// COMMIT, written later in a group of its own (or are dropped at
	// their XA ROLLBACK). While one waits no resume point is kept, so a
	// reader started again reads its prepare again (xa.go).
	prepared map[string]txn
	// spare is the last appended transaction's array of events, for the
	// next one's (the log copies what it keeps): a transaction's events
	// grown from nothing were a twentieth of a streaming run's CPU.
	spare       []source.Event
	checksummed bool // the log's events end in a CRC32 (its format description says)
}

// newStreamRun makes the state of a Pull connected by c, writing to w.
func (p *Puller) newStreamRun(ctx context.Context, c connected, w source.LogWriter) *streamRun {
	r := &streamRun{
		p: p, ctx: ctx, w: w,
		at: c.at, srv: c.srv, passed: c.passed, events: &binlogEvents{stream: c.stream}, file: c.at.File,
		cols:            map[string][]column{},
		keyTypesByTable: map[string]string{},
		signal:          model.TableName(p.cfg.Database, signalTable),
		pending:         map[string]string{},
		checkedMap:      map[string]*replication.TableMapEvent{},
		temps:           temporaries{server: c.srv.ServerID, folds: c.srv.FoldsNames, tables: map[uint32][]string{}},
		adding:          addedAhead(c.at.Tables),
		prepared:        map[string]txn{},
	}
	for t, st := range r.at.Tables {
		if st.Unfollowed != "" {
			r.pending[t] = st.Unfollowed // before this reader started
		}
	}
	r.h = &holder{p: p, w: w, at: &r.at, held: map[string]bool{}, catalog: r.openCatalog}
	r.held = r.h.held
	return r
}

// close closes the connections the run opened: the catalog's, then the
// marks'.
func (r *streamRun) close() {
	if r.catalog != nil {
		r.catalog.Close()
	}
	if r.markDB != nil {
		r.markDB.Close()
	}
}

// keyTypesOf returns the key's types of a replicated table.
func (r *streamRun) keyTypesOf(table string) string {
	if k, ok := r.keyTypesByTable[table]; ok {
		return k
	}
	k := keyTypes(r.at.Tables[table].Def)
	r.keyTypesByTable[table] = k
	return k
}

// columnsOf returns the columns of a replicated table, for decoding.
func (r *streamRun) columnsOf(table string) []column {
	if c, ok := r.cols[table]; ok {
		return c
	}
	st := r.at.Tables[table]
	c := make([]column, len(st.Def.Columns))
	for i, cd := range st.Def.Columns {
		c[i] = parseColumn(cd.Type)
		c[i].charset = st.Charsets[i]
	}
	r.cols[table] = c
	return c
}

// openCatalog returns the catalog's connection, opened at its first use.
func (r *streamRun) openCatalog() (*sql.DB, error) {
	var err error
	if r.catalog == nil {
		r.catalog, err = open(r.ctx, r.p.cfg)
	}
	return r.catalog, err
}

// named returns a table's name as the changefeed has it (namedIn).
func (r *streamRun) named(t string) string { return namedIn(r.at.Tables, t, r.srv.FoldsNames) }

// sameDB reports whether two database names name the same database.
func (r *streamRun) sameDB(a, b string) bool {
	return a == b || r.srv.FoldsNames && strings.EqualFold(a, b)
}

// inCopy reports whether the current transaction is in a table's copy
// (a table added at a point ahead).
func (r *streamRun) inCopy(st tableState) bool {
	return st.AddedAt.covers(r.p.flavor, r.srv.ServerID, r.cur.file, r.cur.pos, r.cur.gtid)
}

// pastAdded reports whether the current transaction is past the point a
// table was added at.
func (r *streamRun) pastAdded(st tableState) bool {
	return st.AddedAt.passedOnItsServer(r.srv.ServerID, r.cur.file, r.inCopy(st))
}

// xaPrepare handles the end of an XA transaction's prepare: its rows
// wait in prepared for its XA COMMIT, its schema changes for the next
// transaction that commits.
func (r *streamRun) xaPrepare(ev *replication.BinlogEvent) error {
	if r.cur.base != 0 {
		// Its rows went to the log in parts, to become visible at
		// the next commit: a transaction not known for XA before
		// its rows. Read again by a new reader (a new log).
		return fmt.Errorf("mysql source: an XA transaction's rows were written to the event log in parts before it was known for one (at %s:%d); the reader starts again", r.file, ev.Header.LogPos)
	}
	if r.cur.xa != "" {
		// A schema change met at its first row happened whatever
		// its outcome, and the table's schema moved on with it:
		// the next transaction to commit writes it, before rows
		// of its own that carry it (one may commit in between).
		r.carried = append(r.carried, r.cur.ddls...)
		r.cur.ddls = nil
		r.prepared[r.cur.xa] = r.cur
	}
	r.cur = txn{}
	return nil
}

// gtid begins a transaction at MySQL's GTID event.
func (r *streamRun) gtid(ev *replication.BinlogEvent, e *replication.GTIDEvent) {
	// The primary's commit time (original), not this server's
	// (immediate, a replica's own apply time): positions mean the
	// same after a failover to a replica, and nothing is written
	// twice under a later one. Zero before MySQL 8.0.1.
	r.begin(ev, txn{commit: int64(cmp.Or(e.OriginalCommitTimestamp, e.ImmediateCommitTimestamp)), gtid: gtidOf(ev), began: ev.Header.Timestamp, file: r.file, pos: ev.Header.LogPos, events: r.spare})
}

// mariadbGTID begins a transaction at MariaDB's GTID event.
func (r *streamRun) mariadbGTID(ev *replication.BinlogEvent, e *replication.MariadbGTIDEvent) {
	r.begin(ev, txn{gtid: gtidOf(ev), began: ev.Header.Timestamp, xaStart: e.Flags&mariadbPreparedXA != 0, group: !e.IsStandalone(), file: r.file, pos: ev.Header.LogPos, events: r.spare})
}

// begin makes t, begun at GTID event ev, the current transaction: it
// takes the spare array, its GTID is passed, and tables added at a
// point it passes join.
func (r *streamRun) begin(ev *replication.BinlogEvent, t txn) {
	r.cur = t
	r.spare = nil
	if r.passed != nil {
		r.passed.add(ev)
	}
	r.at.Tables, r.adding = passAdded(r.at.Tables, r.adding, r.pastAdded)
}

// rows handles a rows event: the signal table's ticks, cuts and marks,
// or a replicated table's rows, its schema followed first where its
// table map says it changed. An error ends the reader.
func (r *streamRun) rows(ev *replication.BinlogEvent, e *replication.RowsEvent) error {
	if r.cur.before == nil {
		r.cur.before = r.at.Tables
	}
	table := model.TableName(string(e.Table.Schema), string(e.Table.Table))
	if table == r.signal {
		r.cur.tickAt = max(r.cur.tickAt, tickOf(e, tickName(r.p.cfg)))
		if isInsert(ev.Header.EventType) {
			// A cut request is an insert; its answer, an
			// update, is not asked again. A snapshot's
			// watermark is an insert too (snapshot.go).
			r.p.answerCuts(e)
			marks := r.p.marksIn(e, r.at.Tables)
			// (Whether the transaction may go in parts is the same
			// whichever tables a read holds: any mark counts.)
			r.cur.marked = r.cur.marked || len(marks) > 0
			for _, m := range marks {
				if !r.held[m.Table] {
					r.cur.events = append(r.cur.events, m)
				}
			}
		}
		return nil
	}
	st, ok := r.at.Tables[table]
	if !ok || st.Dropped || r.inCopy(st) {
		return nil
	}
	// Rows of a held table count as much as any towards the transaction
	// going in parts (whose rows' position is fixed as any
	// transaction's: settle).
	r.cur.seen += len(e.Rows)
	r.cur.size += int(ev.Header.EventSize)
	if err := r.tableRows(ev, e, table, st); err != nil {
		return err
	}
	if r.cur.partDue() {
		if err := r.cur.part(&r.at, r.held, ev.Header.Timestamp, r.w, r.inCopy); err != nil {
			return err
		}
	}
	return nil
}

// tableRows handles a rows event of a replicated table: held, or its
// schema followed first where its table map says it changed, then its
// rows decoded into the transaction's.
func (r *streamRun) tableRows(ev *replication.BinlogEvent, e *replication.RowsEvent, table string, st tableState) error {
	if r.held[table] {
		return nil
	}
	// A table map comes once per transaction and table: checked
	// once, not at every rows event under it.
	stmt, altered := r.pending[table]
	if altered || r.checkedMap[table] != e.Table && !mapMatches(e.Table, st.Def) {
		delete(r.pending, table)
		if _, err := r.openCatalog(); err != nil {
			return err
		}
		next, ddl, why, err := followSchema(r.ctx, r.catalog, table, st, e.Table, stmt)
		if err != nil {
			return fmt.Errorf("mysql source: table %s: %w; the reader starts again", table, err)
		}
		if why != "" {
			r.h.toCopy(r.ctx, table, why)
			return nil
		}
		next.Unfollowed = ""
		if ddl != nil {
			r.cur.addDDL(ddl)
			r.at.Tables = withTable(r.at.Tables, table, next)
			st = next
			delete(r.cols, table)
			delete(r.keyTypesByTable, table)
		} else if next.DefaultCharset != st.DefaultCharset || st.Unfollowed != "" {
			r.at.Tables = withTable(r.at.Tables, table, next)
			st = next
		}
	}
	r.checkedMap[table] = e.Table
	if why := imageLacks(e, st.Def); why != "" {
		r.h.hold(table, why)
		return nil
	}
	evs, err := rowEvents(r.cur.events, e, ev.Header.EventType, table, st, r.columnsOf(table), r.keyTypesOf(table))
	if err != nil {
		r.h.hold(table, "a row does not decode: "+err.Error())
		return nil
	}
	r.cur.events = evs
	return nil
}
