package mysql

import (
	"context"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Resnapshot computes the resume point of a changefeed that cannot go on
// from its own (its binary log purged while it was stopped: ErrPurged),
// for the operator who chose to copy its tables again (changefeed
// resnapshot): where the binary log ends now, every table's schema from
// the catalog now, each beginning at at (the changefeed's checkpoint)
// and reset there. The first transaction read after at begins with a
// TRUNCATE of every table, so the sink drops what it holds of them
// (rows deleted upstream while the binary log was lost among them)
// before their partitions copy them again. Nothing upstream changes.
func Resnapshot(ctx context.Context, uri string, pos source.Position, at model.Ts) (source.Retabled, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return source.Retabled{}, err
	}
	if cfg.Snapshot != "initial" {
		return source.Retabled{}, fmt.Errorf("the changefeed copies no existing rows (snapshot=%s), so a re-snapshot would leave its sink empty: remove it and create it again (with snapshot=initial to copy the tables)", cfg.Snapshot)
	}
	var old position
	if len(pos) > 0 {
		if err := source.DecodePosition(pos, &old); err != nil {
			return source.Retabled{}, fmt.Errorf("the changefeed's stored resume point does not decode: %w", err)
		}
	}
	// The tables as a create checks them: one dropped or changed beyond
	// replication while the changefeed was stopped is refused here.
	if _, _, err := Preflight(ctx, cfg); err != nil {
		return source.Retabled{}, err
	}
	b, err := Begin(ctx, cfg, at)
	if err != nil {
		return source.Retabled{}, err
	}
	var p position
	if err := source.DecodePosition(b, &p); err != nil {
		return source.Retabled{}, err
	}
	// Positions only grow: the new point's transactions come after every
	// one the changefeed passed.
	p.Ts = max(old.Ts, at)
	for t, st := range p.Tables {
		st.ResetAt = at
		if prev, ok := old.Tables[t]; ok {
			st.Version = prev.Version
		}
		p.Tables[t] = st
	}
	if b, err = source.EncodePosition(p); err != nil {
		return source.Retabled{}, err
	}
	return source.Retabled{URI: uri, Position: b, Tables: cfg.Tables, Added: cfg.Tables}, nil
}
