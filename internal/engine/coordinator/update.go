package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	sinks "github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// ErrNotPaused refuses a change that needs the changefeed paused.
var ErrNotPaused = errors.New("the changefeed is not paused")

// UpdateRequest changes a paused changefeed's tables, its sink's options,
// or both (TiCDC's changefeed update, which also needs the changefeed
// paused).
type UpdateRequest struct {
	ID model.ChangefeedID
	// Tables are the tables (or rules) from now on; none leaves them.
	Tables []string
	// SinkOptions change the sink URI's parameters ("" for the default);
	// only those the sink can change on a running sink
	// (sinks.SetOptions).
	SinkOptions map[string]string
	// DryRun checks and computes the change and writes nothing.
	DryRun bool
	By     string
	// refollow is the record of the coordinator's own change that this
	// update is a step of, advanced (nil: an operator's update, which
	// takes such a change over).
	refollow *model.Refollow
	// CopyAgain are tables of Tables copied again (an operator's
	// --copy-table, a held table's remedy): their partitions replaced by
	// new ones that copy them from the checkpoint, as if removed and
	// added back, in one update.
	CopyAgain []string
	// Source is a source URI whose connection the changefeed takes (its
	// user, password, address, driver parameters: sources.Reconnect),
	// keeping everything it replicates; not with Tables or CopyAgain.
	Source string
	// ended is where an earlier try of this update wrote the sink's
	// DROP or rename of the tables it ended: a try computed again from a
	// moved status writes them there again (the same schema files), not
	// a second time later.
	ended *endedAt
}

// endedAt is where the sink was told which tables ended.
type endedAt struct {
	tables []string
	at     model.Ts
}

// UpdateResult is what an update did, or would do.
type UpdateResult struct {
	Tables, Added, Removed []string
	// CopiedAgain are the tables kept and copied again.
	CopiedAgain []string
	// Rules are the table rules after the update, if it has them.
	Rules []string
	// AddedSpans are the added tables' partitions (their ids once
	// written); RemovedPartitions, the ids of the removed tables'.
	AddedSpans        []model.Span
	AddedPartitions   []string
	RemovedPartitions []string
	// At is the changefeed's checkpoint, where the added tables begin.
	At model.Ts
	// Sink is the sink URI after the update; SinkChanges, one line per
	// option changed.
	Sink        string
	SinkChanges []string
	// Source is the source URI after the update (its secrets in it);
	// SourceChanges, one line per part of its connection changed.
	Source        string
	SourceChanges []string
	// Rekeyed are the tables a re-snapshot copies under a primary key
	// other than the one their partitions were cut on.
	Rekeyed []Rekeyed
	// Unpublished are the relations the source's own publication is to
	// lose once the update is stored (source.Retabled.Unpublished).
	Unpublished []string
}

// Rekeyed is a table whose primary key changed since its partitions were
// cut: From and To are its key's columns then (empty when the spans
// did not keep them) and now; Recut, its ranges were cut anew because
// the key no longer encodes as they were cut.
type Rekeyed struct {
	Table, From, To string
	Recut           bool
}

// UpdateChangefeed changes a paused changefeed's tables. Added tables are
// checked as a create checks them, cut into partitions as a create cuts
// them, and begin at the changefeed's checkpoint: their existing rows
// come from their own initial snapshot when the changefeed resumes, and
// every change after it from the stream. Removed tables' partitions end
// where the changefeed was paused; what the sink holds of them stays.
//
// The upstream (the publication) gains the added tables first, so that
// a stored change never waits for a table's changes that are not sent;
// if the change cannot be written to etcd afterwards that is undone. It
// loses the removed tables only once the change is stored: a failed
// change leaves them sending every change.
//
// A paused changefeed's status still moves for a moment after the pause
// (its dispatchers stop and report where they stopped): an update whose
// write meets such a change is computed again from the new state, a few
// times, instead of answering the operator with a conflict. Each try
// undoes its upstream change before the next; a DROP or rename it wrote
// to the sink is written again, which says the same.
func (c *Coordinator) UpdateChangefeed(ctx context.Context, term election.Term, req UpdateRequest) (UpdateResult, error) {
	req.ended = &endedAt{}
	return c.whileStale(ctx, req.ID, "update", func() (UpdateResult, error) { return c.updateOnce(ctx, term, req) })
}

// updateAttempts bounds the tries of an update or a re-snapshot.
const updateAttempts = 5

// whileStale runs a change of a paused changefeed again, from its new
// state, while its write meets a status that moved (meta.ErrStale), up to
// updateAttempts times; what names the change in the log.
func (c *Coordinator) whileStale(ctx context.Context, id model.ChangefeedID, what string, once func() (UpdateResult, error)) (UpdateResult, error) {
	for attempt := 1; ; attempt++ {
		changed := c.view.Changed()
		res, err := once()
		if !errors.Is(err, meta.ErrStale) || attempt == updateAttempts {
			return res, err
		}
		c.log.Info("coordinator: the changefeed changed during the change; computing it again from its new state", "change", what, "changefeed", id, "attempt", attempt)
		select {
		case <-ctx.Done():
			return UpdateResult{}, err
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}

// loadChangefeed reads the cluster's state and a changefeed's entry in
// it, refusing an unknown changefeed.
func (c *Coordinator) loadChangefeed(ctx context.Context, id model.ChangefeedID) (*meta.State, *meta.ChangefeedEntry, error) {
	st, err := c.store.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	e, ok := st.Changefeeds[id]
	if !ok {
		return nil, nil, refuse(meta.ErrChangefeedNotFound, "%s", id)
	}
	return st, e, nil
}

func (c *Coordinator) updateOnce(ctx context.Context, term election.Term, req UpdateRequest) (UpdateResult, error) {
	unlock, err := c.lockTables(ctx, req.ID)
	if err != nil {
		return UpdateResult{}, err
	}
	defer unlock()
	st, e, err := c.loadChangefeed(ctx, req.ID)
	if err != nil {
		return UpdateResult{}, err
	}
	if req.refollow != nil {
		// A step of the coordinator's own change: made only while the
		// change is still its own, as it left it.
		was := *req.refollow
		was.Done--
		if err := stillRefollowing(e, was); err != nil {
			return UpdateResult{}, err
		}
	}
	if e.Status.State != model.ChangefeedPaused {
		return UpdateResult{}, refuse(ErrNotPaused, "changefeed %s is %s; pause it first (cdcctl changefeed pause %s), update it, then resume it", req.ID, e.Status.State, req.ID)
	}
	if req.Source != "" && len(req.Tables)+len(req.CopyAgain) > 0 {
		// The tables' update reaches the source through the connection
		// the changefeed has.
		return UpdateResult{}, refuse(ErrInvalid, "change the source's connection in an update of its own, then its tables")
	}
	if len(req.CopyAgain) > 0 && len(req.Tables) == 0 {
		req.Tables = tablesOf(e.Info.SourceURI) // the same tables
	}
	if len(req.Tables) == 0 && len(req.SinkOptions) == 0 && req.Source == "" {
		return UpdateResult{}, refuse(ErrInvalid, "name the change: the tables, sink options, or the source's connection")
	}
	at := max(e.Status.CheckpointTs, e.Info.StartTs)
	res := UpdateResult{At: at, Sink: e.Info.SinkURI, Source: e.Info.SourceURI}
	if len(req.SinkOptions) > 0 {
		if res.Sink, res.SinkChanges, err = sinks.SetOptions(e.Info.SinkURI, req.SinkOptions); err != nil {
			return UpdateResult{}, refuse(ErrInvalid, "%v", err)
		}
		if err := transactionsFrom(e.Info.SourceURI, res.Sink); err != nil {
			return UpdateResult{}, err
		}
		if _, pins := req.SinkOptions[sinks.KafkaHashPartitions]; pins && !c.view.AllNodesHave(model.FeatureKafkaHashPartitions) {
			// A capture of an earlier version could not open the sink.
			return UpdateResult{}, refuse(ErrInvalid, "%s: a capture of an earlier version runs (cdcctl capture list shows its version) and could not open a sink with it; finish the rolling upgrade first", sinks.KafkaHashPartitions)
		}
	}
	if req.Source != "" {
		if res.Source, res.SourceChanges, err = c.reconnect(ctx, st, e, req.Source); err != nil {
			return UpdateResult{}, err
		}
	}
	if len(req.Tables) == 0 {
		return c.updateConnections(ctx, term, e, req, res)
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ch, err := sources.Retable(octx, e.Info.SourceURI, e.Status.SourcePosition, req.Tables, at, false, req.CopyAgain...)
	if err != nil {
		return UpdateResult{}, refuseReaching(err)
	}
	res.Tables, res.Added, res.Removed, res.CopiedAgain, res.Rules, res.Unpublished = ch.Tables, ch.Added, ch.Removed, ch.Again, ch.Rules, ch.Unpublished
	// A table copied again loses its partitions and gets new ones, as a
	// table removed and one added.
	gone, fresh := append(slices.Clone(ch.Removed), ch.Again...), append(slices.Clone(ch.Added), ch.Again...)
	var removeIDs []string
	for _, r := range st.SortedPartitions(req.ID) {
		if !slices.Contains(gone, r.Route.Span.Table) {
			continue
		}
		if r.Route.Status != model.PartitionActive {
			return UpdateResult{}, refuse(ErrInvalid, "partition %s of table %s is being moved or split; wait for its plan to end (cdcctl plan list), then update", r.Route.ID, r.Route.Span.Table)
		}
		removeIDs = append(removeIDs, r.Route.ID)
	}
	res.RemovedPartitions = removeIDs
	if len(fresh) > 0 {
		src, err := sources.Open(octx, ch.URI, source.Env{Changefeed: req.ID, Log: c.log})
		if err != nil {
			return UpdateResult{}, refuseReaching(err)
		}
		res.AddedSpans, err = spansOf(octx, src, fresh, e.Info.PartitionsPerTable)
		_ = src.Close()
		if err != nil {
			return UpdateResult{}, refuseReaching(err)
		}
	}
	if err := meta.FitsOneTxn(len(res.AddedSpans), len(removeIDs), len(gone)); err != nil {
		return UpdateResult{}, refuse(ErrInvalid, "%v: add or remove fewer tables at once", err)
	}
	if req.DryRun {
		return res, nil
	}

	applied, err := sources.Retable(octx, e.Info.SourceURI, e.Status.SourcePosition, req.Tables, at, true, req.CopyAgain...)
	if err != nil {
		return UpdateResult{}, refuseReaching(err)
	}
	res.Unpublished = applied.Unpublished
	// undo takes back what the change made upstream (the tables it put in
	// the publication) when it is known not to be stored. The removed
	// tables never left it: that is the change's Finish, once stored.
	// A change that may be stored leaves the added ones published too (a
	// table published and not replicated costs only its WAL's decoding;
	// the next change's Finish takes it out).
	undo := func(known bool) {
		if !known || applied.Undo == nil {
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if uerr := applied.Undo(uctx); uerr != nil {
			c.log.Warn("coordinator: a failed update could not take what it added to the publication out again (the added tables, the new relations of tables copied again); their changes are decoded and dropped until the next update of the changefeed's tables", "changefeed", req.ID, "added", applied.Added, "copied_again", applied.Again, "err", uerr)
		}
	}
	endAt := applied.EndedAt
	if ended := slices.Sorted(maps.Keys(applied.Ended)); req.ended != nil && len(ended) > 0 {
		// The same tables ended in a try before: every change they had
		// was before its point too.
		if slices.Equal(req.ended.tables, ended) {
			endAt = req.ended.at
		} else {
			*req.ended = endedAt{tables: ended, at: endAt}
		}
	}
	if err := c.writeEnds(octx, e.Info.SinkURI, applied.Ended, endAt); err != nil {
		undo(true)
		return UpdateResult{}, fmt.Errorf("%w; nothing changed: update again once the sink can be written", err)
	}
	info := e.Info
	info.SourceURI, info.SinkURI, info.UpdatedAt = applied.URI, res.Sink, time.Now().UTC()
	routes, err := c.store.UpdateTables(ctx, term.Fence, e, meta.TablesUpdate{
		Info: info, SourcePosition: applied.Position, Add: res.AddedSpans, Since: at,
		Remove: removeIDs, RemoveTables: append(slices.Clone(applied.Removed), applied.Again...), RoutesAt: st.Revision, Refollow: refollowAfter(e, req),
	})
	known := true // whether the write is known not to have landed
	if err != nil && !errors.Is(err, meta.ErrStale) && !errors.Is(err, meta.ErrTxnTooLarge) && !errors.Is(err, meta.ErrFenced) {
		landed, read := c.landed(ctx, req.ID, e.InfoRevision, info.SourceURI)
		if landed {
			// The write's answer was lost, not the write (etcd's
			// connection broke after the commit).
			c.log.Warn("coordinator: the changefeed's tables were updated, though etcd's answer was lost", "changefeed", req.ID, "err", err)
			c.finish(ctx, req.ID, applied)
			return res, nil
		}
		known = read
		if !known && len(applied.Removed) > 0 {
			c.log.Warn("coordinator: whether the changefeed's tables were updated is not known (etcd's answer was lost and it could not be read); if they were, the removed tables stay in the publication, their changes decoded and dropped, until the next update of its tables", "changefeed", req.ID, "removed", applied.Removed, "err", err)
		}
	}
	if err != nil {
		// Undo the publication's change: the stored URI still names the
		// old tables. (A DROP or rename written to the sink stays: those
		// tables are gone upstream under that name, nothing of them comes
		// after it.) Not once this coordinator is fenced: the next one
		// may have added the same tables meanwhile, which this undo
		// would take out under its stored change; left published, they
		// cost their WAL's decoding until the next change's Finish.
		undo(known && !errors.Is(err, meta.ErrFenced))
		if errors.Is(err, meta.ErrTxnTooLarge) {
			return UpdateResult{}, refuse(ErrInvalid, "%v: add or remove fewer tables at once", err)
		}
		return UpdateResult{}, err
	}
	c.finish(ctx, req.ID, applied)
	for _, r := range routes {
		res.AddedPartitions = append(res.AddedPartitions, r.ID)
	}
	c.log.Info("coordinator: changefeed tables updated", "changefeed", req.ID, "added", ch.Added, "removed", ch.Removed, "copied_again", ch.Again,
		"partitions_added", len(routes), "partitions_removed", len(removeIDs), "sink_changes", res.SinkChanges, "at", at, "by", req.By)
	return res, nil
}

// landed says whether an update whose write answered with an error was
// written all the same: the changefeed's info moved from rev to one with
// the update's source URI; read says whether etcd could be asked.
func (c *Coordinator) landed(ctx context.Context, id model.ChangefeedID, rev int64, uri string) (landed, read bool) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	st, err := c.store.LoadChangefeed(lctx, id)
	if err != nil {
		return false, false
	}
	e, ok := st.Changefeeds[id]
	return ok && e.InfoRevision != rev && e.Info.SourceURI == uri, true
}

// refollowAfter is the record of the coordinator's change of tables
// after an update: the next step of its own, or, after an operator's,
// the record taken over (kept until the resume, so that the coordinator
// makes no more of it).
func refollowAfter(e *meta.ChangefeedEntry, req UpdateRequest) *model.Refollow {
	if req.refollow != nil {
		return req.refollow
	}
	return e.Status.Refollow.TakeOver(req.By)
}

// updateConnections changes only a paused changefeed's sink options or
// its source's connection: the new URIs, and a new incarnation so that
// every node opens the source and the sink again when the changefeed
// resumes.
func (c *Coordinator) updateConnections(ctx context.Context, term election.Term, e *meta.ChangefeedEntry, req UpdateRequest, res UpdateResult) (UpdateResult, error) {
	res.Tables = tablesOf(e.Info.SourceURI)
	if len(res.SinkChanges)+len(res.SourceChanges) == 0 || req.DryRun {
		// Nothing to change (the sink has these options already, the
		// source this connection) is an answer, not a refusal: the
		// update is done, nothing written.
		return res, nil
	}
	info := e.Info
	info.SinkURI, info.SourceURI, info.UpdatedAt = res.Sink, res.Source, time.Now().UTC()
	if _, err := c.store.UpdateTables(ctx, term.Fence, e, meta.TablesUpdate{Info: info, SourcePosition: e.Status.SourcePosition, Refollow: e.Status.Refollow}); err != nil {
		return UpdateResult{}, err
	}
	c.log.Info("coordinator: changefeed connections updated", "changefeed", req.ID, "sink_changes", res.SinkChanges, "source_changes", res.SourceChanges, "by", req.By)
	return res, nil
}

// reconnect is the changefeed's source URI with the connection of given
// (sources.Reconnect) and what changes, checked before anything is
// written: no other changefeed holds what it would hold upstream there,
// and the server it reaches holds the changefeed's position (PostgreSQL:
// its slot, in the same cluster, beginning at or before the resume
// point).
func (c *Coordinator) reconnect(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, given string) (string, []string, error) {
	uri, changes, err := sources.Reconnect(e.Info.SourceURI, given)
	if err != nil {
		return "", nil, refuse(ErrInvalid, "%v", err)
	}
	if len(changes) == 0 {
		return e.Info.SourceURI, nil, nil
	}
	if err := claimsFreeFor(st, string(e.Info.ID), uri, "the new connection leads to what that changefeed holds; check the address"); err != nil {
		return "", nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The login (and what the source checks of its own there), then
	// whether the changefeed's position can go on there.
	_, err = sources.Inspect(ictx, uri, e.Status.SourcePosition)
	if err == nil {
		err = sources.Resumable(ictx, uri, e.Status.SourcePosition)
	}
	if err != nil {
		return "", nil, refuseReaching(fmt.Errorf("the source through the new connection: %w; nothing changed: the changefeed keeps its connection", err))
	}
	return uri, changes, nil
}

// finish makes what is left of a stored change upstream (the
// publication loses the removed tables). Failing, they stay published
// (their changes decoded and dropped, nothing lost) until the next
// update of the changefeed's tables: the log says so.
func (c *Coordinator) finish(ctx context.Context, id model.ChangefeedID, applied source.Retabled) {
	if applied.Finish == nil {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	// Only while the change is the stored one: after a stall long enough
	// for another coordinator to change the tables again, this one's
	// Finish would take out a table that change added (that change's own
	// Finish takes out what this one would have).
	if st, err := c.store.LoadChangefeed(fctx, id); err != nil || st.Changefeeds[id] == nil || st.Changefeeds[id].Info.SourceURI != applied.URI {
		c.log.Warn("coordinator: the changefeed's tables changed again, or could not be read, before the removed ones left its publication; they stay in it, their changes decoded and dropped, until the next update of its tables", "changefeed", id, "removed", applied.Removed, "err", err)
		return
	}
	if err := applied.Finish(fctx); err != nil {
		c.log.Warn("coordinator: the relations its publication names that the changefeed no longer replicates (the tables removed, and any an earlier update left) stay in it, their changes decoded and dropped, until the next update of its tables (or take them out: ALTER PUBLICATION … DROP TABLE; pg_publication_rel lists them)", "changefeed", id, "removed", applied.Removed, "err", err)
	}
}

// tablesOf names a stored source URI's tables (empty if it does not
// open).
func tablesOf(uri string) []string {
	src, err := sources.Open(context.Background(), uri, source.Env{})
	if err != nil {
		return nil
	}
	defer src.Close()
	t, _ := src.Tables(context.Background())
	return t
}

// writeEnds tells the sink that removed tables were dropped or renamed
// upstream: a schema change of each under its old name (DROP TABLE, or
// ALTER TABLE ... RENAME TO; a storage sink's schema file, a DDL message
// on every Kafka partition), as TiCDC writes them. It is placed at
// endedAt, the database's clock once they had ended (now, on this
// node's clock, when the source does not say), after every row the
// table had under that name (all committed before the drop or rename),
// including rows the sink holds beyond the checkpoint, and before a
// table of that name added back begins (its TRUNCATE, after the
// database's clock then). Writing it again (an update tried again)
// writes the same.
func (c *Coordinator) writeEnds(ctx context.Context, sinkURI string, ended map[string]source.EndedTable, endedAt model.Ts) error {
	if len(ended) == 0 {
		return nil
	}
	sk, err := sinks.Open(ctx, sinkURI, sinks.Env{Log: c.log, FileRoot: c.SinkRoot, SpoolDir: c.SpoolDir})
	if err != nil {
		return fmt.Errorf("cannot open the sink to tell it of the tables dropped or renamed upstream: %w", err)
	}
	defer sk.Close()
	at := endedAt
	if at == 0 {
		at = model.TsFromTime(time.Now())
	}
	for _, t := range slices.Sorted(maps.Keys(ended)) {
		end := ended[t]
		stmt := source.DropPrefix + t
		if end.RenamedTo != "" {
			stmt = source.RenameStatement(t, end.RenamedTo)
		}
		ddl := source.Event{Kind: source.KindDDL, Table: t, Def: end.Def, CommitTs: at, TableVersion: at, Statement: stmt}
		if err := sk.WriteDDL(ctx, ddl); err != nil {
			return fmt.Errorf("cannot write %q to the sink: %w", stmt, err)
		}
	}
	return nil
}
