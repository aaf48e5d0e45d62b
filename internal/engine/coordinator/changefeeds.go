package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// ErrInvalid marks a request that cannot work as given; the message says
// what to change.
var ErrInvalid = errors.New("invalid request")

// CreateRequest asks for a changefeed.
type CreateRequest struct {
	ID                 string
	Source             string
	Sink               string
	PartitionsPerTable int
	// By is the user who asks (an authenticated token's), if known.
	By string
}

// MaxPartitionsPerTable bounds the routing table of one table.
const MaxPartitionsPerTable = model.MaxPartitionsPerTable

// createTimeout bounds a create. It is not cut short by its caller (a
// client that gave up): a create stopped half-way has to undo what it
// did upstream, and a client retrying meets it running (409) instead.
const createTimeout = 2 * time.Minute

// CreateChangefeed validates a request, checks that the sink can be
// reached, and writes the changefeed with its routing table. Nothing is
// written when anything is wrong.
func (c *Coordinator) CreateChangefeed(ctx context.Context, term election.Term, req CreateRequest) (model.ChangefeedInfo, error) {
	ctx, done := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer done()
	if req.PartitionsPerTable == 0 {
		req.PartitionsPerTable = 4
	}
	if err := checkCreate(req); err != nil {
		return model.ChangefeedInfo{}, err
	}
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	sinkURI, undoSink, err := registry.Probe(octx, req.Sink, registry.Env{Log: c.log, FileRoot: c.SinkRoot, SpoolDir: c.SpoolDir})
	cancel()
	if err != nil {
		return model.ChangefeedInfo{}, refuseReaching(err)
	}
	if c.view.AllNodesHave(model.FeatureKafkaHashPartitions) {
		// (A capture of an earlier version, in a rolling upgrade, would
		// refuse the pinned URI: the changefeed goes unpinned, and its
		// agents warn once the topic's partitions change.)
		req.Sink = sinkURI
	}
	created := false
	defer func() {
		if !created {
			undoSink() // a refused create leaves nothing on disk
		}
	}()
	// The name is checked before the source is pinned: pinning a database
	// source creates its slot, and a taken name must not touch the slot
	// of the changefeed that holds it.
	st, err := c.store.Load(ctx)
	if err != nil {
		return model.ChangefeedInfo{}, err
	}
	if err := nameFree(st, req.ID); err != nil {
		return model.ChangefeedInfo{}, err
	}
	if err := claimsFree(st, req.ID, req.Source); err != nil {
		return model.ChangefeedInfo{}, err
	}

	now := time.Now()
	mark := new(byte) // this create's, not another's of the name
	if err := c.beginCreate(ctx, term, model.ChangefeedID(req.ID), req.Source, now, mark); err != nil {
		return model.ChangefeedInfo{}, err
	}
	defer c.creating.CompareAndDelete(model.ChangefeedID(req.ID), mark)
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	pinned, err := sources.Pin(pctx, req.Source, model.ChangefeedID(req.ID), now)
	cancel()
	if c.afterPin != nil {
		c.afterPin()
	}
	defer func() {
		if !created {
			c.undoCreate(term, model.ChangefeedID(req.ID), pinned.URI)
		}
	}()
	if err != nil {
		return model.ChangefeedInfo{}, refuseReaching(err)
	}
	src, err := sources.Open(ctx, pinned.URI, source.Env{Changefeed: model.ChangefeedID(req.ID), Log: c.log})
	if err != nil {
		return model.ChangefeedInfo{}, refuseReaching(err)
	}
	defer src.Close()
	info := model.ChangefeedInfo{
		ID: model.ChangefeedID(req.ID), SourceURI: pinned.URI, SinkURI: req.Sink, CreatedBy: req.By,
		PartitionsPerTable: req.PartitionsPerTable, StartTs: src.Start(), CreatedAt: now.UTC(),
	}
	spans, err := initialSpans(ctx, src, req.PartitionsPerTable)
	if err != nil {
		return model.ChangefeedInfo{}, refuseReaching(err)
	}
	// A source may cut fewer ranges than asked (a database table starts
	// as one partition): record what it did.
	info.PartitionsPerTable = mostPerTable(spans)
	if _, err := c.store.CreateChangefeed(ctx, term.Fence, info, pinned.Position, spans); err != nil {
		return model.ChangefeedInfo{}, err
	}
	created = true
	c.log.Info("coordinator: changefeed created", "changefeed", info.ID, "partitions", len(spans), "sink", redact.URI(info.SinkURI))
	return info, nil
}

// transactionsFrom refuses a sink that asks for transaction boundaries
// (transaction-meta=true) from a source without transactions: the
// generator's rows belong to none, and the sink would silently write no
// boundary at all.
func transactionsFrom(sourceURI, sinkURI string) error {
	if (model.ChangefeedInfo{SinkURI: sinkURI}).WantsTransactions() && !sources.HoldsUpstream(sourceURI) {
		return refuse(ErrInvalid, "sink option %s=true needs a database source (postgres://, mysql://): the generator's rows belong to no source transaction; leave the option out", model.TransactionMetaOption)
	}
	return nil
}

// checkCreate is what a create and its preview refuse before reading
// the cluster: the name, the partitions per table (0 stands for the
// default), the sink URI and the transactions the sink may ask for.
func checkCreate(req CreateRequest) error {
	if err := model.ValidateChangefeedID(req.ID); err != nil {
		return refuse(ErrInvalid, "%v", err)
	}
	if n := req.PartitionsPerTable; n < 0 || n > MaxPartitionsPerTable {
		return refuse(ErrInvalid, "partitions per table must be between 1 and %d, got %d", MaxPartitionsPerTable, n)
	}
	if err := registry.Validate(req.Sink); err != nil {
		return refuse(ErrInvalid, "%v", err)
	}
	return transactionsFrom(req.Source, req.Sink)
}

// nameFree refuses a name a changefeed has, or one whose removal's
// cleanup is pending (the new changefeed's slot would have the name of
// the one the cleanup is to drop).
func nameFree(st *meta.State, id string) error {
	if _, taken := st.Changefeeds[model.ChangefeedID(id)]; taken {
		return refuse(meta.ErrChangefeedExists, "%s", id)
	}
	if cl, pending := st.Cleanups[model.ChangefeedID(id)]; pending {
		return refuse(ErrCleanupPending, "%s", cleanupText(cl.Record))
	}
	return nil
}

// ErrClaimed refuses a changefeed that would share what another holds
// upstream (a slot, a server id).
var ErrClaimed = errors.New("held by another changefeed")

// claimsFree refuses a new changefeed whose source would take what
// another changefeed, or a removed one's pending cleanup, holds upstream:
// a slot named in a URI copied from another changefeed, or derived from
// a name that differs from another's only by - and _; a MySQL server id
// likewise. Sharing a slot, each skipped the other's changes, and a
// remove (or a refused create's release) dropped the other's slot.
func claimsFree(st *meta.State, id, uri string) error {
	return claimsFreeFor(st, id, uri, "give this changefeed a name of its own without slot=, publication= or server-id= copied from another (or different ones)")
}

// claimsFreeFor is claimsFree with what to do when a claim is taken.
func claimsFreeFor(st *meta.State, id, uri, advice string) error {
	mine := sources.Claims(uri, model.ChangefeedID(id))
	if len(mine) == 0 {
		return nil
	}
	held := func(owner string, theirs []string) error {
		for _, c := range mine {
			if slices.Contains(theirs, c) {
				return refuse(ErrClaimed, "the %s is %s's: %s", c, owner, advice)
			}
		}
		return nil
	}
	for _, cf := range st.ChangefeedIDs() {
		if string(cf) == id {
			continue // its own (an update of its connection)
		}
		if err := held("changefeed "+string(cf), sources.Claims(st.Changefeeds[cf].Info.SourceURI, cf)); err != nil {
			return err
		}
	}
	for cf, cl := range st.Cleanups {
		owner := "removed changefeed " + string(cf) + " (its cleanup is pending)"
		if cl.Record.Create {
			owner = "changefeed " + string(cf) + " (its create has not finished)"
		}
		if err := held(owner, sources.Claims(cl.Record.Source, cf)); err != nil {
			return err
		}
	}
	return nil
}

// Preview is what a create would replicate: the tables, and those it
// refuses with why.
type Preview struct {
	Tables, Refused []string
}

// PreviewChangefeed checks a create request as CreateChangefeed does,
// without creating anything (the sink is not probed): what it would
// replicate, and what it refuses.
func (c *Coordinator) PreviewChangefeed(ctx context.Context, req CreateRequest) (Preview, error) {
	if err := checkCreate(req); err != nil {
		return Preview{}, err
	}
	st, err := c.store.Load(ctx)
	if err != nil {
		return Preview{}, err
	}
	if err := nameFree(st, req.ID); err != nil {
		return Preview{}, err
	}
	if err := claimsFree(st, req.ID, req.Source); err != nil {
		return Preview{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	f, err := sources.Preview(pctx, req.Source)
	if err != nil {
		return Preview{}, refuseReaching(err) // as the create itself
	}
	return Preview{Tables: f.Tables, Refused: f.Refused}, nil
}

// initialSpans cuts every table of a new changefeed where its source says
// the data divides evenly.
func initialSpans(ctx context.Context, src source.Source, perTable int) ([]model.Span, error) {
	tables, err := src.Tables(ctx)
	if err != nil {
		return nil, err
	}
	return spansOf(ctx, src, tables, perTable)
}

// spansOf cuts tables of a changefeed where its source says the data
// divides evenly.
func spansOf(ctx context.Context, src source.Source, tables []string, perTable int) ([]model.Span, error) {
	var spans []model.Span
	for _, t := range tables {
		bounds, err := src.Boundaries(ctx, t, perTable)
		if err != nil {
			return nil, err
		}
		cut := model.SplitEvenly(t, len(bounds)+1, func(i int) string { return bounds[i-1] })
		if kt, ok := src.(source.KeyTyped); ok {
			types, cols, err := kt.TableKey(ctx, t)
			if err != nil {
				return nil, err
			}
			for i := range cut {
				cut[i].Key, cut[i].KeyColumns = types, cols
			}
		}
		spans = append(spans, cut...)
	}
	return spans, nil
}

func mostPerTable(spans []model.Span) int {
	per, most := map[string]int{}, 0
	for _, sp := range spans {
		per[sp.Table]++
		most = max(most, per[sp.Table])
	}
	return most
}

// RemoveChangefeed deletes a changefeed; its dispatchers and its reader
// stop, then what its source holds upstream (a replication slot) is
// released.
//
// A source that holds something upstream (a PostgreSQL slot) is recorded
// as a cleanup in the same write as the removal, and released now if it
// can be; if not (the database is unreachable), the error says so and
// the coordinator retries until it is released (cleanups.go). The
// changefeed is removed either way.
func (c *Coordinator) RemoveChangefeed(ctx context.Context, term election.Term, id model.ChangefeedID) error {
	st, err := c.store.LoadChangefeed(ctx, id) // its source is all it needs
	if err != nil {
		return err
	}
	e, ok := st.Changefeeds[id]
	var cleanup *model.SourceCleanup
	if ok && sources.HoldsUpstream(e.Info.SourceURI) {
		cleanup = &model.SourceCleanup{Changefeed: id, Source: e.Info.SourceURI, Since: time.Now().UTC()}
	}
	if err := c.store.RemoveChangefeed(ctx, term.Fence, id, cleanup); err != nil {
		return err
	}
	if cleanup == nil {
		return nil
	}
	if err := c.releaseSource(cleanup.Source); err != nil {
		c.log.Warn("coordinator: the removed changefeed's source is not released yet; retrying until it is", "changefeed", id, "source", sources.Redact(cleanup.Source), "err", err)
		return &CleanupPendingError{Changefeed: id, Err: err}
	}
	if err := c.store.ForgetCleanup(ctx, term.Fence, id); err != nil {
		c.log.Warn("coordinator: the removed changefeed's source is released, but its cleanup record stays until the next retry", "changefeed", id, "err", err)
	}
	return nil
}

// CleanupPendingError says a changefeed was removed but what its source
// holds upstream is not released yet: the coordinator retries.
type CleanupPendingError struct {
	Changefeed model.ChangefeedID
	Err        error
}

func (e *CleanupPendingError) Error() string {
	return fmt.Sprintf("changefeed %s removed, but its replication slot and publication are not dropped yet: %v", e.Changefeed, e.Err)
}

func (e *CleanupPendingError) Unwrap() error { return e.Err }

// releaseSource releases what a source holds upstream, retrying while
// its reader still holds it, for up to ReleaseWait.
func (c *Coordinator) releaseSource(uri string) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.ReleaseWait)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if err = sources.Remove(ctx, uri); err == nil {
			return nil
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return err
}

// placeMaintainers keeps every changefeed's maintainer on a schedulable
// node: the basic scheduler places maintainers whose node is gone; the
// balance scheduler moves one off a node that may not keep work
// (Draining, Stopping), or from the node with the most maintainers to the
// one with the fewest while they differ by more than one. A maintainer
// keeps no state, so moving it is a new placement with the next epoch; its
// dispatchers keep running.
func (c *Coordinator) placeMaintainers(ctx context.Context, term election.Term, st *meta.State) error {
	dest := plan.NewDestinations(st.SchedulableNodeIDs())
	byNode := map[model.NodeID][]*meta.ChangefeedEntry{}
	var orphans, leaving []*meta.ChangefeedEntry
	now := time.Now()
	for _, id := range st.ChangefeedIDs() {
		e := st.Changefeeds[id]
		_, registered := st.Nodes[e.Maintainer.Node]
		switch {
		case e.Maintainer.Node == "" || !registered:
			orphans = append(orphans, e)
		case failedHere(e, now) != nil:
			// Seed 000 scenario 6: it could not start there.
			leaving = append(leaving, e)
		case st.Drain != nil && e.Maintainer.Node == st.Drain.Target:
			// The drain moves these, in its batches.
		case !dest.IsCandidate(e.Maintainer.Node):
			leaving = append(leaving, e)
		default:
			dest.Count(e.Maintainer.Node)
			byNode[e.Maintainer.Node] = append(byNode[e.Maintainer.Node], e)
		}
	}
	var firstErr error
	place := func(e *meta.ChangefeedEntry, node model.NodeID, why string) error {
		err := c.store.PlaceMaintainer(ctx, term.Fence, e, node)
		switch {
		case err == nil:
			c.log.Info("coordinator: maintainer placed", "changefeed", e.Info.ID, "node", node, "epoch", e.Maintainer.Epoch+1, "why", why)
		case errors.Is(err, meta.ErrFenced):
			return err
		case firstErr == nil && !errors.Is(err, meta.ErrStale):
			firstErr = err
		}
		return nil
	}
	for _, e := range append(orphans, leaving...) {
		node, ok := dest.NextExcept(func(n model.NodeID) bool { return maintainerExcluded(e, n, now) })
		if !ok {
			c.log.Debug("coordinator: no capture can take this maintainer now", "changefeed", e.Info.ID, "maintainers_per_capture", dest.String())
			continue // no schedulable node it may go to; placed when one appears
		}
		c.log.Debug("coordinator: maintainer to the capture with the fewest maintainers", "changefeed", e.Info.ID, "to", node, "maintainers_per_capture_after", dest.String())
		why := "its node is gone"
		if in := failedHere(e, now); in != nil {
			why = "it could not start on " + string(e.Maintainer.Node) + ": " + in.Err
		} else if e.Maintainer.Node != "" && e.MaintainerRevision > 0 {
			if _, alive := st.Nodes[e.Maintainer.Node]; alive {
				why = "its node is " + st.LivenessOf(e.Maintainer.Node).String()
			}
		} else {
			why = "new changefeed"
		}
		if err := place(e, node, why); err != nil {
			return err
		}
	}
	// One balancing move per pass: the next pass sees its effect.
	most, mostLoad, least, leastLoad := dest.Extremes()
	if most != "" && mostLoad-leastLoad > 1 && len(byNode[most]) > 0 {
		e := byNode[most][len(byNode[most])-1]
		if maintainerExcluded(e, least, now) {
			return firstErr // not back where it could not start
		}
		if err := place(e, least, "balance"); err != nil {
			return err
		}
	}
	return firstErr
}

// MaintainerExclusion is how long a capture on which a changefeed's
// maintainer could not start is kept out of that changefeed's maintainer
// placements (seed 000 scenario 6). The record is the changefeed's own
// status, so a new coordinator keeps it too.
const MaintainerExclusion = 5 * time.Minute

// failedHere is the incident in which e's maintainer said it could not
// start under its current placement, if it did.
func failedHere(e *meta.ChangefeedEntry, now time.Time) *model.Incident {
	for i := len(e.Status.Incidents) - 1; i >= 0; i-- {
		in := &e.Status.Incidents[i]
		if in.Kind == model.IncidentMaintainerFailed && in.Node == e.Maintainer.Node && in.Epoch == e.Maintainer.Epoch && now.Sub(in.Time) < MaintainerExclusion {
			return in
		}
	}
	return nil
}

// maintainerExcluded says whether e's maintainer recently could not start
// on node.
func maintainerExcluded(e *meta.ChangefeedEntry, node model.NodeID, now time.Time) bool {
	for _, in := range e.Status.Incidents {
		if in.Kind == model.IncidentMaintainerFailed && in.Node == node && now.Sub(in.Time) < MaintainerExclusion {
			return true
		}
	}
	return false
}
