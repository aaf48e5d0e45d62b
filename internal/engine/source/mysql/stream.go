package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// position is the puller's resume point: the binary log coordinates just
// after a transaction, the commit position that transaction was given,
// and every table's schema there. Reading on from it gives every later
// transaction the position it had before: positions come from the binary
// log alone (its events' times and the ticks written into it).
type position struct {
	File string `json:"file"`
	Pos  uint32 `json:"pos"`
	// GTID is the same point as the servers name it (gtid.go): the
	// reader resumes from it when it is known, on any server fed from the
	// one File and Pos belong to (Server, its server_id).
	GTID   string                `json:"gtid,omitempty"`
	Server uint32                `json:"server,omitempty"`
	Ts     model.Ts              `json:"ts"`
	Tables map[string]tableState `json:"tables"`
}

// tableState is a table's schema at a resume point.
type tableState struct {
	Def     *source.TableDef `json:"def"`
	Since   model.Ts         `json:"since"`
	Version uint64           `json:"version,omitempty"`
	// Charsets are the character columns not in UTF-8, by index.
	Charsets map[int]string `json:"charsets,omitempty"`
	// Dropped: the table was dropped upstream (its DROP TABLE is in the
	// sink); rows of a table created again under its name are not its.
	Dropped bool `json:"dropped,omitempty"`
	// ResetAt is where the table was added to the changefeed (changefeed
	// update): the first transaction after it begins with a TRUNCATE of
	// it, so the sink holds nothing of it from before (a table removed and
	// added back) when its rows are copied again.
	ResetAt model.Ts `json:"reset_at,omitempty"`
}

// signalTable is where the puller writes its ticks: a row per
// changefeed (named by its start, fixed in its URI: tickName), updated with the
// server's clock. A transaction that only changes it resolves the stream
// up to its position, so an idle database's changefeed still advances.
// Verify asks for a cut there too (cut.go).
const signalTable = "cdcctl_signal"

// tickName is the signal table's row of a changefeed's ticks.
func tickName(cfg Config) string { return fmt.Sprintf("tick/%d", cfg.Start) }

// tickEvery is how often the puller writes a tick.
const tickEvery = 500 * time.Millisecond

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

	mu     sync.Mutex
	points []position // resume points passed, oldest first
	issues []source.TableIssue
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

// Begin fixes a new changefeed's first resume point: where the binary
// log ends now, and each table's schema from the catalog. It creates the
// signal table if it is missing.
func Begin(ctx context.Context, cfg Config, start model.Ts) (source.Position, error) {
	db, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+quoteTable(model.TableName(cfg.Database, signalTable))+
		" (changefeed VARCHAR(128) PRIMARY KEY, at BIGINT NOT NULL)"); err != nil {
		return nil, fmt.Errorf("create the signal table %s.%s (the user needs CREATE, INSERT, UPDATE and DELETE on it): %w", cfg.Database, signalTable, explain(cfg, err))
	}
	p := position{Ts: start, Tables: map[string]tableState{}}
	var version, executed string
	if err := db.QueryRowContext(ctx, "SELECT @@version, @@server_id").Scan(&version, &p.Server); err != nil {
		return nil, explain(cfg, err)
	}
	if p.File, p.Pos, executed, err = masterStatus(ctx, db); err != nil {
		return nil, fmt.Errorf("read where the binary log ends (SHOW MASTER STATUS; the user needs REPLICATION CLIENT): %w", explain(cfg, err))
	}
	if p.GTID, _, err = gtidsAt(ctx, db, flavorOf(version), p.File, p.Pos, executed); err != nil {
		return nil, explain(cfg, err)
	}
	for _, t := range cfg.Tables {
		def, charsets, err := tableDef(ctx, db, t)
		if err != nil {
			return nil, err
		}
		p.Tables[t] = tableState{Def: def, Since: start, Charsets: charsets}
	}
	return json.Marshal(p)
}

// txn is the transaction the puller is reading.
type txn struct {
	// stmt is its schema change statement, if it is one; stmtDB, the
	// statement's default database.
	stmt, stmtDB string
	ddls         []*source.Event // schema changes its rows follow (schema.go)
	events       []source.Event
	tickAt       int64 // the server's clock in µs, when it wrote a tick
	commit       int64 // the commit's time in µs (MySQL) or seconds × 10^6
}

// Pull implements source.Puller: it reads the binary log from a resume
// point into w until ctx ends or the server fails.
func (p *Puller) Pull(ctx context.Context, from source.Position, w source.LogWriter) error {
	var at position
	if err := json.Unmarshal(from, &at); err != nil {
		return fmt.Errorf("mysql source: the stored resume point does not decode: %w", err)
	}
	for t, st := range at.Tables {
		// Resume points stored before definitions named their dialect.
		if st.Def != nil && st.Def.Dialect == "" {
			d := *st.Def
			d.Dialect = source.DialectMySQL
			st.Def = &d
			at.Tables[t] = st
		}
	}
	// The server the address leads to now: after a failover, another
	// than the one the stored file and offset belong to.
	srv, err := serverOf(ctx, p.cfg)
	if err != nil {
		return err
	}
	p.flavor = srv.Flavor
	known := at.GTID != ""
	if !known && (at.Server == srv.ServerID || at.Server == 0) {
		// No transaction before the point, or a point stored before
		// GTIDs were kept: its GTIDs from its file and offset, on the
		// server they belong to.
		if at.GTID, known, err = gtidsOf(ctx, p.cfg, srv.Flavor, at.File, at.Pos); err != nil {
			return err
		}
	}
	passed, err := parseGTIDs(p.flavor, at.GTID, known)
	if err != nil {
		return err
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: p.cfg.ServerID, Flavor: p.flavor, Host: p.cfg.Host, Port: uint16(p.cfg.Port), User: p.cfg.User, Password: p.cfg.Password,
		TimestampStringLocation: time.UTC, HeartbeatPeriod: time.Second, ReadTimeout: 10 * time.Second,
		// A failed stream ends Pull: the maintainer starts it again from
		// the checkpoint (go-mysql's own retry hid a purged position).
		DisableRetrySync: true,
		Logger:           slog.New(slog.DiscardHandler),
	})
	defer syncer.Close()
	var stream *replication.BinlogStreamer
	if at.GTID != "" {
		// By GTID: the same transactions on any server of the
		// replication topology.
		set, err := passed.syncSet()
		if err != nil {
			return err
		}
		stream, err = syncer.StartSyncGTID(set)
		if err != nil {
			return p.explainStream(err, at)
		}
	} else {
		if at.Server != 0 && srv.ServerID != at.Server {
			return fmt.Errorf("%s is server %d, not server %d where the changefeed's binary log position %s:%d is, and the position has no GTIDs to resume by elsewhere (turn gtid_mode on in MySQL, or point the source at server %d again)", p.cfg.Addr(), srv.ServerID, at.Server, at.File, at.Pos, at.Server)
		}
		stream, err = syncer.StartSync(gomysql.Position{Name: at.File, Pos: at.Pos})
		if err != nil {
			return p.explainStream(err, at)
		}
	}
	p.mu.Lock()
	p.points = []position{at}
	p.issues = nil // this run finds them again
	p.mu.Unlock()
	for t, st := range at.Tables {
		if st.Dropped {
			p.report(t, source.TableDropped, st.Since, droppedReason(p.cf, t))
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
	signal := model.TableName(p.cfg.Database, signalTable)
	pending := map[string]string{} // tables an ALTER named since: its statement
	held := map[string]bool{}
	hold := func(table, why string) {
		held[table] = true
		w.Hold(table, at.Ts+1)
		p.report(table, source.TableHeld, at.Ts+1, heldReason(p.cf, table, why))
		p.log.Warn("mysql source: a table is held; the others go on", "changefeed", p.cf, "table", table, "reason", why)
	}
	checkedMap := map[string]*replication.TableMapEvent{} // the last table map found to match, by table
	var catalog *sql.DB                                   // read when a schema changes
	defer func() {
		if catalog != nil {
			catalog.Close()
		}
	}()
	var cur txn
	file := at.File
	for {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return p.explainStream(err, at)
		}
		switch e := ev.Event.(type) {
		case *replication.RotateEvent:
			file = string(e.NextLogName)
			continue
		case *replication.GTIDEvent:
			cur = txn{commit: int64(e.ImmediateCommitTimestamp)}
			if passed != nil {
				passed.add(ev)
			}
		case *replication.MariadbGTIDEvent:
			cur = txn{}
			if passed != nil {
				passed.add(ev)
			}
		case *replication.RowsEvent:
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
			if !ok || held[table] || st.Dropped {
				break
			}
			// A table map comes once per transaction and table: checked
			// once, not at every rows event under it.
			stmt, altered := pending[table]
			if altered || checkedMap[table] != e.Table && !mapMatches(e.Table, st.Def) {
				delete(pending, table)
				if catalog == nil {
					if catalog, err = open(ctx, p.cfg); err != nil {
						return err
					}
				}
				next, ddl, why := followSchema(ctx, catalog, table, st, e.Table, stmt)
				if why != "" {
					hold(table, why)
					break
				}
				if ddl != nil {
					cur.ddls = append(cur.ddls, ddl)
					at.Tables = withTable(at.Tables, table, next)
					st = next
					delete(cols, table)
					delete(keyTypesByTable, table)
				}
			}
			checkedMap[table] = e.Table
			evs, err := rowEvents(e, ev.Header.EventType, table, st, columnsOf(table), keyTypesOf(table))
			if err != nil {
				hold(table, "a row does not decode: "+err.Error())
				break
			}
			cur.events = append(cur.events, evs...)
		case *replication.QueryEvent:
			q := strings.TrimSpace(string(e.Query))
			switch {
			case strings.EqualFold(q, "BEGIN"):
				continue
			case strings.EqualFold(q, "COMMIT"):
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
		if cur.commit == 0 {
			cur.commit = int64(ev.Header.Timestamp) * 1_000_000
		}
		ts := max(at.Ts+1, model.TsFromMicros(max(cur.commit, cur.tickAt)))
		if cur.stmt != "" {
			q := cur.stmt
			// A statement at or before where a table joined the
			// changefeed (its Since: a table added, copied from there)
			// is history the table's schema already holds.
			joined := func(t string) bool { st, ok := at.Tables[t]; return ok && ts > st.Since }
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
				if names, ok := droppedTables(q, cur.stmtDB); ok {
					for _, t := range names {
						st, replicated := at.Tables[t]
						if !replicated || st.Dropped || held[t] || !joined(t) {
							continue
						}
						st.Version++
						st.Dropped = true
						at.Tables = withTable(at.Tables, t, st)
						cur.ddls = append(cur.ddls, &source.Event{Kind: source.KindDDL, Table: t, Def: st.Def, SchemaVersion: st.Version,
							Statement: source.DropPrefix + quoteTable(t)})
						p.report(t, source.TableDropped, ts, droppedReason(p.cf, t))
						p.log.Warn("mysql source: a replicated table was dropped upstream; it ends, the others go on", "changefeed", p.cf, "table", t)
					}
					break
				}
				for _, t := range namedTables(q, cur.stmtDB, at.Tables) {
					if !joined(t) {
						continue
					}
					if followable(q) {
						pending[t] = q
						continue
					}
					if !held[t] && !at.Tables[t].Dropped {
						hold(t, "renamed or changed upstream by a statement the reader does not follow ("+q+")")
					}
				}
			}
		}
		var reset []*source.Event
		if at.Tables, reset = resets(at.Tables, held, ts); len(reset) > 0 {
			cur.ddls = append(reset, cur.ddls...)
		}
		// Each schema change at its own position, then the rows: a
		// table's rows after its change carry the change's position as
		// their table version.
		since := map[string]model.Ts{}
		versions := map[string]uint64{}
		for i, d := range cur.ddls {
			d.CommitTs, d.TableVersion = ts, ts
			since[d.Table], versions[d.Table] = ts, d.SchemaVersion
			st := at.Tables[d.Table]
			st.Since = ts
			at.Tables = withTable(at.Tables, d.Table, st)
			if i < len(cur.ddls)-1 || len(cur.events) > 0 {
				ts++
			}
		}
		for i := range cur.events {
			cur.events[i].CommitTs = ts
			if v, ok := since[cur.events[i].Table]; ok {
				// Rows read before the transaction's commit brought a
				// reset (a TRUNCATE of a table added back) are of the
				// version it begins: a row naming the version before
				// would make the sink describe the new one without it.
				cur.events[i].TableVersion, cur.events[i].SchemaVersion = v, versions[cur.events[i].Table]
			}
		}
		out := make([]source.Event, 0, len(cur.ddls)+len(cur.events))
		for _, d := range cur.ddls {
			out = append(out, *d)
		}
		out = append(out, cur.events...)
		if len(out) > 0 {
			if err := w.Append(out); err != nil {
				return err
			}
		} else {
			w.Resolve(ts)
		}
		at = position{File: file, Pos: ev.Header.LogPos, GTID: passed.String(), Server: srv.ServerID, Ts: ts, Tables: at.Tables}
		p.mu.Lock()
		p.points = append(p.points, at)
		if len(p.points) > maxPoints {
			p.points = append(p.points[:0], p.points[len(p.points)-maxPoints/2:]...)
		}
		p.mu.Unlock()
		cur = txn{}
	}
}

// ErrPurged means the binary log a changefeed resumes from is no longer
// on the server: going on from anywhere else would lose changes.
var ErrPurged = fmt.Errorf("the binary log the changefeed resumes from was purged (%w)", source.ErrUnresumable)

// explainStream says what a failure of the binary log stream means and
// what to do: the position purged (the changefeed cannot go on), another
// reader under the same server id, or the server's own words.
func (p *Puller) explainStream(err error, at position) error {
	var me *gomysql.MyError
	if errors.As(err, &me) {
		msg := strings.ToLower(me.Message)
		switch {
		case me.Code == 4052 || strings.Contains(msg, "same server_uuid/server_id") || strings.Contains(msg, "same server_id"):
			// The server keeps the newest connection under a server id
			// and ends the older one: this reader was replaced.
			return fmt.Errorf("binary log of %s: another reader connected under server id %d and took over (the changefeed's reader moved to another capture, or a replica uses this id; if no other capture reads this changefeed, give it a server-id= no replica uses): %s", p.cfg.Addr(), p.cfg.ServerID, me.Message)
		case me.Code == 1236 && (strings.Contains(msg, "could not find first log file") || strings.Contains(msg, "purged") || strings.Contains(msg, "could not open log file")):
			return fmt.Errorf("%w: %s at %d is no longer on %s (%s); the changefeed cannot go on from its checkpoint without losing changes: copy its tables again (cdcctl changefeed resnapshot NAME) or remove it (docs/mysql.md), and keep binary logs longer than a changefeed may stop (binlog_expire_logs_seconds)",
				ErrPurged, at.File, at.Pos, p.cfg.Addr(), me.Message)
		}
		return fmt.Errorf("binary log of %s from %s at %d: %s", p.cfg.Addr(), at.File, at.Pos, redactIn(me.Error(), p.cfg.Password))
	}
	return fmt.Errorf("binary log of %s from %s at %d: %s", p.cfg.Addr(), at.File, at.Pos, redactIn(err.Error(), p.cfg.Password))
}

// maxPoints bounds the resume points a puller keeps; the checkpoint is
// never far behind the newest.
const maxPoints = 4096

// commits says whether an event ends a transaction: an XID (InnoDB's
// commit), a COMMIT statement, or a statement that is its own
// transaction (a schema change).
func commits(ev *replication.BinlogEvent) bool {
	switch e := ev.Event.(type) {
	case *replication.XIDEvent:
		return true
	case *replication.QueryEvent:
		return !strings.EqualFold(strings.TrimSpace(string(e.Query)), "BEGIN")
	}
	return false
}

// tickOf reads this changefeed's tick from a change of the signal table:
// the server's clock in µs; 0 when the change is not its tick.
func tickOf(e *replication.RowsEvent, name string) int64 {
	var at int64
	for _, r := range e.Rows {
		if len(r) == 2 && signalName(r[0]) == name {
			if v, ok := r[1].(int64); ok {
				at = max(at, v)
			}
		}
	}
	return at
}

// tick writes this changefeed's tick into the signal table every
// tickEvery until ctx ends.
func (p *Puller) tick(ctx context.Context) {
	db, err := sql.Open("mysql", p.cfg.DSN())
	if err != nil {
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	signal := quoteTable(model.TableName(p.cfg.Database, signalTable))
	stmt := "INSERT INTO " + signal + " (changefeed, at) VALUES (?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) ON DUPLICATE KEY UPDATE at = VALUES(at)"
	answer := "UPDATE " + signal + " SET at = ? WHERE changefeed = ? AND at = 0"
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	var last time.Time
	for {
		if _, err := db.ExecContext(ctx, stmt, tickName(p.cfg)); err != nil && ctx.Err() == nil && time.Since(last) > 30*time.Second {
			last = time.Now()
			p.log.Warn("mysql source: cannot write a tick; the changefeed advances only with other writes", "changefeed", p.cf, "err", explain(p.cfg, err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case a := <-p.answers:
			if _, err := db.ExecContext(ctx, answer, a.at, a.name); err != nil && ctx.Err() == nil {
				p.log.Warn("mysql source: cannot answer verify's cut; verify will ask again", "changefeed", p.cf, "err", explain(p.cfg, err))
			}
		}
	}
}

// ResumePoint implements source.Puller: the newest resume point at or
// below the checkpoint.
func (p *Puller) ResumePoint(checkpoint model.Ts) (source.Position, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.points) - 1; i >= 0; i-- {
		if p.points[i].Ts <= checkpoint {
			b, err := json.Marshal(p.points[i])
			return b, err == nil
		}
	}
	return nil, false
}

// Confirm implements source.Puller: the server keeps its binary logs by
// time, not for a reader, so there is nothing to release.
func (p *Puller) Confirm(source.Position) {}
