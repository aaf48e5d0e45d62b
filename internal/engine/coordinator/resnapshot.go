package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// ResnapshotRequest asks for a changefeed's tables to be copied again
// (changefeed resnapshot).
type ResnapshotRequest struct {
	ID model.ChangefeedID
	// DryRun checks and computes the re-snapshot and writes nothing.
	DryRun bool
	By     string
}

// IncidentResnapshot is the incident a re-snapshot leaves.
const IncidentResnapshot = "resnapshot"

// ResnapshotChangefeed is the operator's answer to a changefeed that
// cannot go on from its position because the upstream no longer holds it
// (a MySQL binary log purged while it was stopped): never done by
// itself, since copying every table again is the operator's choice
// (the other is removing the changefeed). The changefeed, failed or
// paused, reads on from where the upstream's log ends now; each of its
// partitions is replaced by a new one over the same key range that
// begins at the changefeed's checkpoint and copies its range again; the
// sink gets a TRUNCATE of every table first, so it ends up holding the
// tables as they are, without the rows deleted while the log was lost.
// The changefeed is left paused, its error cleared: resume it to go on.
func (c *Coordinator) ResnapshotChangefeed(ctx context.Context, term election.Term, req ResnapshotRequest) (UpdateResult, error) {
	return c.whileStale(ctx, req.ID, "re-snapshot", func() (UpdateResult, error) { return c.resnapshotOnce(ctx, term, req) })
}

func (c *Coordinator) resnapshotOnce(ctx context.Context, term election.Term, req ResnapshotRequest) (UpdateResult, error) {
	unlock, err := c.lockTables(ctx, req.ID)
	if err != nil {
		return UpdateResult{}, err
	}
	defer unlock()
	st, e, err := c.loadChangefeed(ctx, req.ID)
	if err != nil {
		return UpdateResult{}, err
	}
	if err := sources.Resnapshots(e.Info.SourceURI); err != nil {
		return UpdateResult{}, refuse(ErrInvalid, "%v", err)
	}
	if s := e.Status.State; s != model.ChangefeedFailed && s != model.ChangefeedPaused {
		return UpdateResult{}, refuse(ErrNotPaused, "changefeed %s is %s; a re-snapshot copies every table again and is for a changefeed that cannot go on from its position (failed); to copy a running one's tables again, pause it first (cdcctl changefeed pause %s)", req.ID, s, req.ID)
	}
	at := max(e.Status.CheckpointTs, e.Info.StartTs)
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ch, err := sources.Resnapshot(octx, e.Info.SourceURI, e.Status.SourcePosition, at)
	if err != nil {
		return UpdateResult{}, refuseReaching(err)
	}
	res := UpdateResult{At: at, Sink: e.Info.SinkURI, Tables: ch.Tables, Added: ch.Tables}
	// The same key ranges as now: a layout the operator split or moved
	// stays; only where the partitions begin changes.
	parts := st.SortedPartitions(req.ID)
	var remove []string
	for _, r := range parts {
		if r.Route.Status != model.PartitionActive {
			return UpdateResult{}, refuse(ErrInvalid, "partition %s is being moved or split; wait for its plan to end (cdcctl plan list), then re-snapshot", r.Route.ID)
		}
		remove = append(remove, r.Route.ID)
	}
	// Its own deadline, longer than the preflight's: a table cut anew
	// reads its keys' quantiles, which on a large table takes what a
	// create's cut takes.
	kctx, kcancel := context.WithTimeout(ctx, 10*time.Minute)
	defer kcancel()
	src, err := sources.Open(kctx, ch.URI, source.Env{Changefeed: req.ID, Log: c.log})
	if err != nil {
		return UpdateResult{}, refuseReaching(err)
	}
	res.AddedSpans, res.Rekeyed, err = respans(kctx, src, parts, e.Info.PartitionsPerTable)
	_ = src.Close()
	if err != nil {
		// As a create's cut: a database that went away meanwhile is 503.
		return UpdateResult{}, refuseReaching(fmt.Errorf("reading the tables' primary keys to copy them again: %w", err))
	}
	res.RemovedPartitions = remove
	if req.DryRun {
		return res, nil
	}
	info := e.Info
	info.UpdatedAt = time.Now().UTC()
	// A cluster without tokens knows no one's name.
	why := "by " + cmp.Or(req.By, "an operator") + ": every table copied again from the checkpoint, read on from where the upstream's log ends"
	if e.Status.Error != "" {
		why += "; it had failed: " + e.Status.Error
	}
	routes, err := c.store.UpdateTables(ctx, term.Fence, e, meta.TablesUpdate{
		Info: info, SourcePosition: ch.Position, Add: res.AddedSpans, Since: at, Remove: remove, RoutesAt: st.Revision,
		Resnapshot: true, Incident: model.Incident{Time: time.Now().UTC(), Kind: IncidentResnapshot, Reason: why},
		Refollow: e.Status.Refollow.TakeOver(req.By),
	})
	if err != nil {
		if errors.Is(err, meta.ErrTxnTooLarge) {
			// Written whole or not at all: a half-replaced changefeed
			// resumed would miss the ranges not yet replaced.
			return UpdateResult{}, refuse(ErrInvalid, "%v: a re-snapshot replaces the changefeed's %d partitions in one transaction; remove the changefeed and create it again", err, len(remove))
		}
		return UpdateResult{}, err
	}
	for _, r := range routes {
		res.AddedPartitions = append(res.AddedPartitions, r.ID)
	}
	c.log.Info("coordinator: changefeed re-snapshotted", "changefeed", req.ID, "tables", ch.Tables, "partitions", len(routes), "at", at, "by", req.By)
	return res, nil
}

// respans are the spans a re-snapshot's partitions copy: each table's
// ranges as they are, under its key as the catalog has it now. The copy
// goes by the key read now, so a key moved to other columns while the
// changefeed was stopped is copied under its new columns (the old ones
// refused every chunk). A table whose key now encodes otherwise (other
// types, or columns), or whose spans do not agree on how it was keyed,
// is cut anew, since its ranges' bounds are keys of the old encoding:
// into as many partitions as it had, and at least perTable.
func respans(ctx context.Context, src source.Source, routes []meta.RouteRecord, perTable int) ([]model.Span, []Rekeyed, error) {
	kt, keyed := src.(source.KeyTyped)
	if !keyed {
		spans := make([]model.Span, len(routes))
		for i, r := range routes {
			spans[i] = r.Route.Span
		}
		return spans, nil, nil
	}
	var tables []string
	byTable := map[string][]model.Span{}
	for _, r := range routes {
		t := r.Route.Span.Table
		if _, ok := byTable[t]; !ok {
			tables = append(tables, t)
		}
		byTable[t] = append(byTable[t], r.Route.Span)
	}
	var spans []model.Span
	var rekeyed []Rekeyed
	for _, t := range tables {
		types, cols, err := kt.TableKey(ctx, t)
		if err != nil {
			return nil, nil, err
		}
		old := byTable[t]
		same, from := true, old[0].KeyColumns
		for _, sp := range old {
			same = same && model.SameKeyEncoding(sp.Key, types) && sp.Key == old[0].Key
			if sp.KeyColumns != from {
				from = ""
			}
		}
		if !same || from != "" && from != cols {
			rekeyed = append(rekeyed, Rekeyed{Table: t, From: from, To: cols, Recut: !same})
		}
		if same {
			for _, sp := range old {
				sp.Key, sp.KeyColumns = types, cols
				spans = append(spans, sp)
			}
			continue
		}
		cut, err := spansOf(ctx, src, []string{t}, max(perTable, len(old)))
		if err != nil {
			return nil, nil, err
		}
		spans = append(spans, cut...)
	}
	return spans, rekeyed, nil
}
