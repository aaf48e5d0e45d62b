package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// Resumable says whether the server at uri can go on from the resume
// point pos: the checks a reader makes before it streams (sameSystem,
// slotBefore), made when an update changes a changefeed's connection, so
// that a server of another cluster, or a slot past the changefeed's
// position, is refused before anything is written rather than fail the
// changefeed when it resumes. A resume point that names no cluster (one
// written before they were kept) is checked for the slot alone.
func Resumable(ctx context.Context, uri string, pos source.Position) error {
	cfg, err := ParseURI(uri)
	if err != nil || len(pos) == 0 {
		return err
	}
	var p position
	if err := source.DecodePosition(pos, &p); err != nil {
		return fmt.Errorf("the changefeed's stored resume point does not decode: %w", err)
	}
	from, err := pglogrepl.ParseLSN(p.LSN)
	if err != nil {
		return fmt.Errorf("the changefeed's stored resume point: %w", err)
	}
	pc, conn, err := replicationConn(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return explain(cfg, err)
	}
	defer cat.Close()
	cfg.timeline = p.Timeline
	if _, err = resumeChecks(ctx, cfg, pc, conn, cat.conn, p.System, from); err != nil {
		return explain(cfg, err)
	}
	return slotHeld(ctx, cat.conn, cfg)
}

// identify is IDENTIFY_SYSTEM of the server cfg names: its cluster,
// timeline and where its WAL ends.
func identify(ctx context.Context, cfg Config) (pglogrepl.IdentifySystemResult, error) {
	_, conn, err := replicationConn(ctx, cfg)
	if err != nil {
		return pglogrepl.IdentifySystemResult{}, err
	}
	defer conn.Close(context.Background())
	return pglogrepl.IdentifySystem(ctx, conn)
}

// replicationConn connects to the server cfg names in logical
// replication mode (a walsender of its database), and returns the
// connection's configuration with it; a connection that fails is
// explained.
func replicationConn(ctx context.Context, cfg Config) (*pgconn.Config, *pgconn.PgConn, error) {
	pc, err := pgconn.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, nil, err
	}
	pc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, nil, explain(cfg, err)
	}
	return pc, conn, nil
}

// slotHeld refuses a slot that is gone (dropped outside cdcctl) or lost
// its WAL (invalidated: wal_status lost), as the stream's start would
// find: asked before a resume, the changefeed fails at once instead of a
// moment after its resume was answered.
func slotHeld(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	var status *string
	err := conn.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, cfg.Slot).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s (%w)", slotDropped(cfg), source.ErrUnresumable)
	case err != nil:
		return explain(cfg, err)
	case status != nil && *status == "lost":
		return fmt.Errorf("%s (%w)", slotInvalidated(cfg, "its wal_status is lost"), source.ErrUnresumable)
	}
	return nil
}

// resumeChecks are the checks before a stream from from begins on the
// replication connection conn (pc its configuration), with cat a
// connection to the same database: the server is of the cluster system
// names ("" when not known), and the slot begins at or before from. It
// returns the server's cluster and timeline.
func resumeChecks(ctx context.Context, cfg Config, pc *pgconn.Config, conn *pgconn.PgConn, cat *pgx.Conn, system string, from pglogrepl.LSN) (pglogrepl.IdentifySystemResult, error) {
	id, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return id, err
	}
	if err := sameSystem(serverName(pc, conn), system, id.SystemID, from); err != nil {
		return id, err
	}
	if err := walReaches(serverName(pc, conn), id.XLogPos, from); err != nil {
		return id, err
	}
	if err := sameHistory(ctx, conn, serverName(pc, conn), cfg.timeline, id.Timeline, from); err != nil {
		return id, err
	}
	return id, slotBefore(ctx, cat, cfg, from)
}

// sameHistory refuses a server whose timeline branched from the one the
// resume point was read on (read) before the resume point: a standby
// promoted (a failover) before it had received all the changefeed read,
// under asynchronous replication, that has since written past the resume
// point (walReaches refuses one that has not). Its own changes from the
// branch up to the resume point would be passed over, and the
// changefeed's last ones are not in its history. A promotion after the
// resume point (a planned switchover, a synchronous standby) branched
// past it: nothing is lost, the stream goes on.
func sameHistory(ctx context.Context, conn *pgconn.PgConn, server string, read, now int32, from pglogrepl.LSN) error {
	if read == 0 || read == now {
		return nil
	}
	refuse := func(why string) error {
		return fmt.Errorf("PostgreSQL at %s is on timeline %d, and the changefeed read up to %s on timeline %d: %s; the changes the changefeed wrote past the branch are not in its history, and its own between the branch and %s would be passed over: point the source back at the server it read (cdcctl changefeed pause, then update --source), or remove the changefeed and create it again (its tables are copied again) (%w)",
			server, now, from, read, why, from, source.ErrUnresumable)
	}
	if read > now {
		return refuse("its history is older than the one the changefeed read (a server restored from a backup)")
	}
	h, err := pglogrepl.TimelineHistory(ctx, conn, now)
	if err != nil {
		return fmt.Errorf("read the history of timeline %d (TIMELINE_HISTORY): %w", now, err)
	}
	for _, line := range strings.Split(string(h.Content), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != strconv.Itoa(int(read)) {
			continue
		}
		at, err := pglogrepl.ParseLSN(f[1])
		if err != nil {
			return fmt.Errorf("the history of timeline %d: %q: %w", now, line, err)
		}
		if from <= at {
			return nil
		}
		return refuse(fmt.Sprintf("it branched from timeline %d at %s, before the resume point (a standby promoted before it had received all of it)", read, at))
	}
	return refuse(fmt.Sprintf("timeline %d is not in its history", read))
}

// walReaches refuses a server whose WAL ends before the resume point from:
// the changefeed read that far on a server of this cluster, so this one
// is not where its history goes on. A standby promoted before it had
// received all of it (asynchronous replication: a failover), or a server
// restored from a backup, writes its own changes from where its WAL ends,
// and a stream from the resume point, on a slot created there again,
// passes over those up to it; the changes the changefeed wrote past that
// end are not in its history at all.
func walReaches(server string, end, from pglogrepl.LSN) error {
	if end >= from {
		return nil
	}
	return fmt.Errorf("PostgreSQL at %s has written its WAL up to %s only, before %s where the changefeed resumes: it is not the server the changefeed read up to there (a standby promoted before it had received all of it, under asynchronous replication, or a server restored from a backup), and the changes the changefeed wrote past %s are not in its history; point the source back at the server it read (cdcctl changefeed pause, then update --source), or remove the changefeed and create it again on this one (its tables are copied again) (%w)", server, end, from, end, source.ErrUnresumable)
}

// sameSystem refuses a server of another database cluster than the one
// the resume point was read from: its LSNs are another history's, and
// reading from one would stream that server's changes as if they came
// after the changefeed's. The source URI was pointed at another server
// (changefeed update --source, or a DNS name moved) that is not a
// physical replica of the first (a promoted replica keeps its primary's
// identifier).
func sameSystem(server, want, got string, from pglogrepl.LSN) error {
	if want == "" || want == got {
		return nil
	}
	return fmt.Errorf("PostgreSQL at %s is another database cluster (system identifier %s) than the one the changefeed read (%s), and its position %s means nothing there: point the source back at that server or a physical replica of it (cdcctl changefeed pause, then update --source), or remove the changefeed and create it again on this one (its tables are copied again) (%w)", server, got, want, from, source.ErrUnresumable)
}

// serverName names the server a connection reached as the URI names it,
// with the address it connected to where that says more (a host name
// that moved, one of several hosts).
func serverName(pc *pgconn.Config, conn *pgconn.PgConn) string {
	name := fmt.Sprintf("%s:%d", pc.Host, pc.Port)
	if addr := conn.Conn().RemoteAddr().String(); addr != name && !strings.HasPrefix(pc.Host, "/") {
		name += " (" + addr + ")"
	}
	return name
}

// slotBefore refuses a slot that begins after the resume point from:
// PostgreSQL would start streaming at the slot's own position without a
// word, and the changes in between would be lost. A changefeed's slot is
// never past it, as its confirmed position follows only persisted resume
// points; one that is was created again or advanced outside cdcctl (by
// hand, or by an upgrade that does not carry slots), or is another
// server's slot of the same name (a source URI pointed elsewhere). A
// slot that is missing is left to START_REPLICATION to report
// (slotGone).
func slotBefore(ctx context.Context, conn *pgx.Conn, cfg Config, from pglogrepl.LSN) error {
	var confirmed *string
	err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, cfg.Slot).Scan(&confirmed)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && confirmed == nil {
		return nil
	}
	if err != nil {
		return explain(cfg, err)
	}
	at, err := pglogrepl.ParseLSN(*confirmed)
	if err != nil || at <= from {
		return nil
	}
	return fmt.Errorf("replication slot %s begins at %s, after %s where the changefeed resumes: the changes in between are not in it (the slot was created again or advanced outside cdcctl, or this server is not the one the changefeed read); remove the changefeed and create it again (its tables are copied again) (%w)", cfg.Slot, at, from, source.ErrUnresumable)
}
