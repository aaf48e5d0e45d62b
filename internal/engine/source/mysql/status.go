package mysql

// A changefeed's upstream as its status shows it (changefeed get, the
// retention metrics): where the reader resumes, how much binary log the
// server keeps from there, and whether the reader streams now.

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// Inspect reports the binary log position a changefeed resumes from, how
// much binary log the server keeps from it on, and for how long the
// server keeps binary logs; with what the changefeed's operator should
// know of the server (cascading foreign keys, XA transactions waiting).
func Inspect(ctx context.Context, uri string, pos source.Position) (*source.Status, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	var p position
	if len(pos) > 0 {
		_ = source.DecodePosition(pos, &p)
	}
	at := logAt{File: p.File, Pos: p.Pos, GTID: p.GTID, Server: p.Server}
	st := newStatus(cfg, at)
	db, err := open(ctx, cfg)
	if err != nil {
		// Said, not hidden: a status without it showed "the server
		// keeps 0 B of binary log" for a password rotated upstream.
		// What is known without the server goes with it.
		return st, err
	}
	defer db.Close()
	st.Active = streaming(ctx, db, cfg.ServerID)
	// The binary log before the warnings: those read the catalog, and
	// the status must come within the caller's time ('changefeed get'
	// waits 3 s) with what matters most.
	_ = kept(ctx, db, at, st) // what could not be read is left out
	tables := cfg.Tables
	if len(p.Tables) > 0 {
		tables = slices.Sorted(maps.Keys(p.Tables)) // those the rules found too
	}
	st.Warnings = cascades(ctx, db, tables)
	if w := xaWaiting(ctx, db); w != "" {
		st.Warnings = append(st.Warnings, w)
	}
	if w := rowsRefused(ctx, db, cfg); w != "" {
		st.Warnings = append(st.Warnings, w)
	}
	return st, nil
}

// Retention is Inspect's binary log alone: how much the server keeps
// from the changefeed's position on, whether it still has the position,
// and how long it keeps binary logs. The agents read it every 30 s for
// their metrics, and ask the server nothing else: Inspect's warnings
// read the catalog (a user with SELECT alone has SHOW CREATE TABLE read
// for up to 64 tables). An error when the server could not say all of
// it: the caller keeps what it had.
func Retention(ctx context.Context, uri string, pos source.Position) (*source.Status, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	// The position's place in the binary log, not its tables'
	// definitions (a changefeed of thousands of tables has megabytes).
	var at logAt
	if len(pos) > 0 {
		_ = source.DecodePosition(pos, &at)
	}
	st := newStatus(cfg, at)
	db, err := open(ctx, cfg)
	if err != nil {
		return st, err
	}
	defer db.Close()
	return st, kept(ctx, db, at, st)
}

// logAt is a position's place in the binary log (its JSON is the
// position's).
type logAt struct {
	File   string `json:"file"`
	Pos    uint32 `json:"pos"`
	GTID   string `json:"gtid"`
	Server uint32 `json:"server"`
}

// newStatus is what a status says without the server: the URI's
// configuration, and where the reader resumes.
func newStatus(cfg Config, at logAt) *source.Status {
	st := &source.Status{Kind: "mysql", Snapshot: source.SnapshotStatus(cfg.Snapshot)}
	st.Filter = strings.Join(cfg.Filter, ",")
	if at.File != "" {
		st.Position = fmt.Sprintf("%s:%d", at.File, at.Pos)
		if at.GTID != "" {
			st.Position += ", GTID " + at.GTID
		}
	}
	return st
}

// kept fills in how long the server keeps binary logs and how much of
// them it keeps from at on (the rest of at's file, and every file
// after it), or that it no longer has at's file. An error when the
// server did not answer all of it.
func kept(ctx context.Context, db *sql.DB, at logAt, st *source.Status) error {
	st.RetentionSeconds = retention(ctx, db)
	var serverID uint32
	if err := db.QueryRowContext(ctx, "SELECT @@server_id").Scan(&serverID); err != nil {
		return err
	}
	if at.Server != 0 && serverID != at.Server {
		// The file and offset are another server's (a failover): this
		// one's files say nothing of them; the reader resumes by GTID.
		st.Position += fmt.Sprintf(" (on server %d; this is server %d)", at.Server, serverID)
		return nil
	}
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	held, listed := false, false
	for rows.Next() {
		var name string
		var size int64
		dest := []any{&name, &size}
		for len(dest) < len(cols) {
			dest = append(dest, new(sql.RawBytes))
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		listed = true
		switch {
		case at.File == "":
		case name == at.File:
			held = true
			st.RetainedBytes += max(size-int64(at.Pos), 0) // read up to Pos already
		case binlogAtOrAfter(name, at.File):
			st.RetainedBytes += size
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if at.File != "" && listed && !held {
		st.Purged, st.RetainedBytes = true, 0
	}
	return nil
}

// streaming says whether a reader registered under serverID streams the
// binary log now: the server lists it among its replicas (SHOW REPLICAS,
// SHOW SLAVE HOSTS before MySQL 8.0.22 and on MariaDB).
func streaming(ctx context.Context, db *sql.DB, serverID uint32) bool {
	if serverID == 0 {
		return false
	}
	for _, q := range []string{"SHOW REPLICAS", "SHOW SLAVE HOSTS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			continue
		}
		cols, _ := rows.Columns()
		found := false
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols))
			dest := make([]any, len(cols))
			for i := range vals {
				dest[i] = &vals[i]
			}
			if rows.Scan(dest...) == nil && len(vals) > 0 && string(vals[0]) == strconv.FormatUint(uint64(serverID), 10) {
				found = true // Server_id is the first column of both
			}
		}
		rows.Close()
		return found
	}
	return false
}

// binlogAtOrAfter compares binary log file names (base.000012): by their
// numbers, then by name.
func binlogAtOrAfter(name, from string) bool {
	if len(name) != len(from) {
		return len(name) > len(from)
	}
	return name >= from
}
