package mysql

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

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
	// DefaultCharset is the table's default character set ("" when
	// not known: a state saved before it was kept, or after a statement
	// the history does not follow; the catalog's then).
	DefaultCharset string `json:"default_charset,omitempty"`
	// Dropped: the table was dropped upstream (its DROP TABLE is in the
	// sink); rows of a table created again under its name are not its.
	Dropped bool `json:"dropped,omitempty"`
	// DroppedAt is where the DROP TABLE was read (0 in a resume point
	// saved before it was kept).
	DroppedAt model.Ts `json:"dropped_at,omitempty"`
	// Unfollowed are the statements since the table's definition was
	// last known that the schema history did not follow (CONVERT TO
	// CHARACTER SET, an online schema change's swap): its next row reads
	// the catalog. Kept here so that a reader started again after them
	// does too (markUnfollowed).
	Unfollowed string `json:"unfollowed,omitempty"`
	// ResetAt is where the table was added to the changefeed (changefeed
	// update): the first transaction after it begins with a TRUNCATE of
	// it, so the sink holds nothing of it from before (a table removed and
	// added back) when its rows are copied again.
	ResetAt model.Ts `json:"reset_at,omitempty"`
	// Shadow is an online schema change of the table under way (osc.go):
	// its shadow table's CREATE, then the ALTERs the shadow received, as
	// read; kept in the resume point so that a reader started again in
	// the middle of the migration still applies them at the swap.
	Shadow []string `json:"shadow,omitempty"`
	// AddedAt is where the binary log ended when the table was added
	// (added.go): its transactions up to there are in its copy; the
	// reader forgets it once past.
	AddedAt *logPoint `json:"added_at,omitempty"`
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
		err := fmt.Errorf("binary log of %s from %s at %d: %s", p.cfg.Addr(), at.File, at.Pos, redactIn(me.Error(), p.cfg.Password))
		if busy := busyError(err, me.Code, me.Message); busy != nil {
			return busy
		}
		return err
	}
	err = fmt.Errorf("binary log of %s from %s at %d: %s", p.cfg.Addr(), at.File, at.Pos, redactIn(err.Error(), p.cfg.Password))
	if model.DialFailed(err) {
		return model.Unreachable(err) // worth a retry, as a failed login's dial is (explain)
	}
	return err
}

// maxPoints bounds the resume points a puller keeps (thinned).
const maxPoints = 4096

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
	end, err := endOfLog(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read where the binary log ends (SHOW MASTER STATUS; the user needs REPLICATION CLIENT): %w", explain(cfg, err))
	}
	p := position{File: end.File, Pos: end.Pos, GTID: end.GTID, Server: end.Server, Ts: start, Tables: map[string]tableState{}}
	for _, t := range cfg.Tables {
		st, err := readTable(ctx, db, t)
		if err != nil {
			return nil, err
		}
		st.Since = start
		p.Tables[t] = st
	}
	return source.EncodePosition(p)
}

// ResumePoint implements source.Puller: the newest resume point at or
// below the checkpoint. Points before it are dropped: checkpoints only
// grow.
func (p *Puller) ResumePoint(checkpoint model.Ts) (source.Position, bool) {
	p.mu.Lock()
	i := sort.Search(len(p.resumes), func(i int) bool { return p.resumes[i].Ts > checkpoint }) - 1
	if i < 0 {
		p.mu.Unlock()
		return nil, false
	}
	at := p.resumes[i]
	p.resumes = p.resumes[i:]
	p.mu.Unlock()
	return p.kept.Encode(at.Ts, at, func(err error) {
		p.log.Error("mysql source: the changefeed's resume point cannot be kept: its checkpoint is saved with the one kept before, the server keeps its binary log from there and a restart reads again from there", "changefeed", p.cf, "err", err)
	})
}

// thinned bounds a puller's resume points (each commit on the server
// makes one, any database's, every changefeed's ticks): past maxPoints
// every other one of the older half goes, never the oldest. A checkpoint
// that lags more commits than are kept still finds one at or below it,
// further back than the newest (a resume reads a little more again);
// dropping the oldest half left none under a steady load, and the stored
// position stayed where the reader began.
func thinned(points []position) []position {
	if len(points) <= maxPoints {
		return points
	}
	half := len(points) / 2
	out := points[:1]
	for i := 2; i < half; i += 2 {
		out = append(out, points[i])
	}
	return append(out, points[half:]...)
}
