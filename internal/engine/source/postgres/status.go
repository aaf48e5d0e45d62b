package postgres

// A changefeed's upstream as its status shows it (changefeed get, the
// retention metrics): its slot, and what its table rules match that it
// does not replicate.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// Inspect reads the slot's state for 'changefeed get' (the snapshot's
// progress is the partitions': the caller sums it); given the
// changefeed's resume point, also what its table rules match that it
// does not replicate.
func Inspect(ctx context.Context, uri string, pos source.Position) (*source.Status, error) {
	cfg, conn, st, err := slotOf(ctx, uri)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	st.Warnings = unpublished(ctx, conn, cfg)
	if w := rewritesUnseen(ctx, conn, cfg); w != "" {
		st.Warnings = append(st.Warnings, w)
	}
	st.Warnings = append(st.Warnings, inheritedWarnings(ctx, conn, cfg)...)
	if len(cfg.Filter) > 0 && pos != nil {
		st.Filter = strings.Join(cfg.Filter, ",")
		var p position
		if len(pos) > 0 {
			_ = source.DecodePosition(pos, &p)
		}
		if f, err := follow(ctx, cfg, p.oids()); err == nil {
			st.Unreplicated = f.Refused
			added, _ := source.TablesDiff(cfg.Tables, f.Tables)
			for _, t := range added {
				st.Unreplicated = append(st.Unreplicated, t+": matched since the changefeed last followed its rules; added within a minute")
			}
		}
	}
	return st, nil
}

// Retention is the slot's state alone (how much WAL it holds, how much
// more may be written before PostgreSQL gives it up): the agents read
// it every 30 s for their metrics, and ask the server nothing else
// (Inspect's warnings read the catalog).
func Retention(ctx context.Context, uri string, _ source.Position) (*source.Status, error) {
	_, conn, st, err := slotOf(ctx, uri)
	if err != nil {
		return nil, err
	}
	conn.Close(context.Background())
	return st, nil
}

// slotOf connects to a changefeed's database and reads its slot's
// state; the caller closes the connection.
func slotOf(ctx context.Context, uri string) (Config, *pgx.Conn, *source.Status, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return cfg, nil, nil, err
	}
	conn, err := pgx.Connect(ctx, cfg.ConnString)
	if err != nil {
		return cfg, nil, nil, explain(cfg, err)
	}
	st, err := slotStatus(ctx, conn, cfg)
	if err != nil {
		conn.Close(context.Background())
		return cfg, nil, nil, err
	}
	return cfg, conn, st, nil
}

// slotStatus reads the changefeed's slot from pg_replication_slots.
func slotStatus(ctx context.Context, conn *pgx.Conn, cfg Config) (*source.Status, error) {
	st := &source.Status{Kind: "postgres", Slot: cfg.Slot, Snapshot: source.SnapshotStatus(cfg.Snapshot)}
	var confirmed, walStatus *string
	var retained *int64
	err := conn.QueryRow(ctx, `SELECT active, confirmed_flush_lsn::text, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8, wal_status, safe_wal_size FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, cfg.Slot).Scan(&st.Active, &confirmed, &retained, &walStatus, &st.SafeBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("replication slot %s does not exist: it was dropped outside cdcctl; recreate the changefeed", cfg.Slot)
	}
	if err != nil {
		return nil, explain(cfg, err)
	}
	if confirmed != nil {
		st.Position = *confirmed
	}
	if retained != nil {
		st.RetainedBytes = *retained
	}
	if walStatus != nil {
		st.WALStatus = *walStatus
	}
	return st, nil
}
