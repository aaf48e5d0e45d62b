package mysql

// A changefeed's upstream as its status shows it (changefeed get, the
// retention metrics): where the reader resumes, how much binary log the
// server keeps from there, and whether the reader streams now.

import (
	"context"
	"database/sql"
	"encoding/json"
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
	cfg, st, p, err := statusOf(uri, pos)
	if err != nil {
		return nil, err
	}
	db, err := open(ctx, cfg)
	if err != nil {
		// Said, not hidden: a status without it showed "the server
		// keeps 0 B of binary log" for a password rotated upstream.
		// What is known without the server goes with it.
		return st, err
	}
	defer db.Close()
	st.Active = streaming(ctx, db, cfg.ServerID)
	tables := cfg.Tables
	if len(p.Tables) > 0 {
		tables = slices.Sorted(maps.Keys(p.Tables)) // those the rules found too
	}
	st.Warnings = cascades(ctx, db, tables)
	if w := xaWaiting(ctx, db); w != "" {
		st.Warnings = append(st.Warnings, w)
	}
	kept(ctx, db, p, st)
	return st, nil
}

// Retention is Inspect's binary log alone: how much the server keeps
// from the changefeed's position on, whether it still has the position,
// and how long it keeps binary logs. The agents read it every 30 s for
// their metrics, and ask the server nothing else: Inspect's warnings
// read the catalog (a user with SELECT alone has SHOW CREATE TABLE read
// for up to 64 tables).
func Retention(ctx context.Context, uri string, pos source.Position) (*source.Status, error) {
	cfg, st, p, err := statusOf(uri, pos)
	if err != nil {
		return nil, err
	}
	db, err := open(ctx, cfg)
	if err != nil {
		return st, err
	}
	defer db.Close()
	kept(ctx, db, p, st)
	return st, nil
}

// statusOf is what a status says without the server: the URI's
// configuration, and the position pos (where the reader resumes).
func statusOf(uri string, pos source.Position) (Config, *source.Status, position, error) {
	var p position
	cfg, err := ParseURI(uri)
	if err != nil {
		return cfg, nil, p, err
	}
	st := &source.Status{Kind: "mysql", Snapshot: source.SnapshotStatus(cfg.Snapshot)}
	st.Filter = strings.Join(cfg.Filter, ",")
	if len(pos) > 0 && json.Unmarshal(pos, &p) == nil && p.File != "" {
		st.Position = fmt.Sprintf("%s:%d", p.File, p.Pos)
		if p.GTID != "" {
			st.Position += ", GTID " + p.GTID
		}
	}
	return cfg, st, p, nil
}

// kept fills in how long the server keeps binary logs and how much of
// them it keeps from position p on (the files from p's on), or that it
// no longer has p's file.
func kept(ctx context.Context, db *sql.DB, p position, st *source.Status) {
	st.RetentionSeconds = retention(ctx, db)
	var serverID uint32
	if db.QueryRowContext(ctx, "SELECT @@server_id").Scan(&serverID) == nil && p.Server != 0 && serverID != p.Server {
		// The file and offset are another server's (a failover): this
		// one's files say nothing of them; the reader resumes by GTID.
		st.Position += fmt.Sprintf(" (on server %d; this is server %d)", p.Server, serverID)
		return
	}
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return
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
		if rows.Scan(dest...) != nil {
			continue
		}
		listed = true
		held = held || name == p.File
		if p.File != "" && binlogAtOrAfter(name, p.File) {
			st.RetainedBytes += size
		}
	}
	if p.File != "" && listed && !held && rows.Err() == nil {
		st.Purged, st.RetainedBytes = true, 0
	}
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
