package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/redact"
)

func changefeedOf(st *meta.State, e *meta.ChangefeedEntry) api.Changefeed {
	lag := int64(0)
	if e.Status.CheckpointTs > 0 {
		lag = time.Since(e.Status.CheckpointTs.Time()).Milliseconds()
	}
	return api.Changefeed{
		ID: string(e.Info.ID), State: string(e.Status.Shown()), CheckpointTs: uint64(e.Status.CheckpointTs), CheckpointLagMs: lag,
		Maintainer: string(e.Maintainer.Node), MaintainerEpoch: e.Maintainer.Epoch, Partitions: len(st.Partitions[e.Info.ID]),
		Source: sources.Redact(e.Info.SourceURI), Sink: redact.URI(e.Info.SinkURI), PartitionsPerTable: e.Info.PartitionsPerTable,
		StartTs: uint64(e.Info.StartTs), CreatedAt: e.Info.CreatedAt, CreatedBy: e.Info.CreatedBy, Error: redact.Text(e.Status.Error),
		TableIssues: maskedIssues(e.Status.Tables),
		Refollow:    e.Status.Refollow,
	}
}

// maskedIssues and maskedIncidents are what the engine stored, fit to
// show: their reasons and errors quote drivers' and openers' errors,
// which may quote a URI with its secrets (gocloud's "open bucket
// s3://key:secret@…").
func maskedIssues(in []model.TableIssue) []model.TableIssue {
	out := slices.Clone(in)
	for i := range out {
		out[i].Reason = redact.Text(out[i].Reason)
	}
	return out
}

func maskedIncidents(in []model.Incident) []model.Incident {
	out := slices.Clone(in)
	for i := range out {
		out[i].Reason, out[i].Err = redact.Text(out[i].Reason), redact.Text(out[i].Err)
	}
	return out
}

func notFound(id string) error {
	return api.Errorf(api.CodeNotFound, "list the changefeeds with 'cdcctl changefeed list'", "changefeed %q not found", id)
}

func (b backend) Changefeeds(ctx context.Context) (*api.ChangefeedList, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	out := &api.ChangefeedList{Version: api.SchemaVersion, Changefeeds: []api.Changefeed{}}
	for _, id := range st.ChangefeedIDs() {
		out.Changefeeds = append(out.Changefeeds, changefeedOf(st, st.Changefeeds[id]))
	}
	for _, c := range st.Cleanups {
		r := c.Record
		out.PendingCleanups = append(out.PendingCleanups, api.PendingCleanup{Changefeed: string(r.Changefeed), Source: sources.Redact(r.Source),
			Since: r.Since, Attempts: r.Attempts, LastError: redact.Text(r.LastError), Create: r.Create})
	}
	slices.SortFunc(out.PendingCleanups, func(a, b api.PendingCleanup) int { return strings.Compare(a.Changefeed, b.Changefeed) })
	return out, nil
}

// changefeed is the state a read sees and a changefeed in it; 404 if
// there is no such changefeed.
func (b backend) changefeed(ctx context.Context, id string) (*meta.State, *meta.ChangefeedEntry, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	e, ok := st.Changefeeds[model.ChangefeedID(id)]
	if !ok {
		return nil, nil, notFound(id)
	}
	return st, e, nil
}

func (b backend) Changefeed(ctx context.Context, id string) (*api.ChangefeedResponse, error) {
	st, e, err := b.changefeed(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &api.ChangefeedResponse{Version: api.SchemaVersion, Changefeed: changefeedOf(st, e), Incidents: maskedIncidents(e.Status.Incidents)}
	// The upstream's side (a slot's retained WAL); an upstream that does
	// not answer quickly is reported, not waited for.
	ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	// Every partition copies its own range: their progress, in etcd,
	// says how far the snapshot is, also while the upstream is down.
	pt, copying := model.ProgressTable{}, false
	spans := map[string]model.Span{}
	for pid, r := range st.Partitions[e.Info.ID] {
		pt[pid], spans[pid] = st.Progress[e.Info.ID][pid].Progress, r.Route.Span
		copying = copying || pt[pid].Copy != (model.CopyProgress{})
	}
	still, keys := source.CopyingTables(spans, pt)
	warnings := copiedUnderKeys(keys)
	if ss, err := sources.Inspect(ictx, e.Info.SourceURI, e.Status.SourcePosition); err != nil {
		out.SourceStatus = &api.SourceStatus{Error: redact.Text(err.Error()), Warnings: warnings}
		if ss != nil {
			// What the source knows without its server (where it resumes).
			out.SourceStatus.Kind, out.SourceStatus.Position, out.SourceStatus.Snapshot = ss.Kind, ss.Position, ss.Snapshot
		}
		if copying && out.SourceStatus.Snapshot == "" {
			out.SourceStatus.Snapshot = model.CopySummary(pt)
		}
	} else if ss != nil {
		out.SourceStatus = &api.SourceStatus{Kind: ss.Kind, Slot: ss.Slot, Active: ss.Active, Position: ss.Position, RetainedBytes: ss.RetainedBytes, SafeBytes: ss.SafeBytes, WALStatus: ss.WALStatus, RetentionSeconds: ss.RetentionSeconds, Purged: ss.Purged, Snapshot: ss.Snapshot,
			Filter: ss.Filter, Unreplicated: ss.Unreplicated, Warnings: append(ss.Warnings, warnings...)}
		if ss.Snapshot == "" && ss.Kind != "" {
			out.SourceStatus.Snapshot = model.CopySummary(pt)
		}
		if len(still) > 0 && ss.Snapshot == "" { // an initial snapshot, not done
			// What slows the copy (a table whose chunks are sorted), with
			// the fix: the copying capture logs it, the operator asks here.
			out.SourceStatus.Warnings = append(out.SourceStatus.Warnings, sources.CopyWarnings(ictx, e.Info.SourceURI, still)...)
		}
	}
	return out, nil
}

// copiedUnderKeys warns of each table whose partitions copied it by
// different key columns (keys: each table's, as their progress records
// them): its primary key moved while it copied, and partitions that had
// finished under the old key do not read again, so rows whose old and
// new keys fall in different partitions may be missing from the sink.
func copiedUnderKeys(keys map[string][]string) []string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(keys)) {
		if ks := keys[t]; len(ks) > 1 {
			slices.Sort(ks)
			out = append(out, "initial snapshot: "+t+": its partitions copied it by different primary keys ("+strings.Join(ks, " and ")+
				"): its key moved while it copied, and rows may be missing from the sink; copy the table again: 'cdcctl changefeed pause', 'cdcctl changefeed update --copy-table "+t+"', 'cdcctl changefeed resume'")
		}
	}
	return out
}

func (b backend) Partitions(ctx context.Context, changefeed, node string) (*api.PartitionList, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	if changefeed != "" {
		if _, ok := st.Changefeeds[model.ChangefeedID(changefeed)]; !ok {
			return nil, notFound(changefeed)
		}
	}
	out := &api.PartitionList{Version: api.SchemaVersion, Partitions: []api.Partition{}}
	for _, cf := range st.ChangefeedIDs() {
		if changefeed != "" && string(cf) != changefeed {
			continue
		}
		for _, r := range st.SortedPartitions(cf) {
			if node != "" && string(r.Route.Node) != node {
				continue
			}
			out.Partitions = append(out.Partitions, partitionOf(st, r))
		}
	}
	return out, nil
}

func partitionOf(st *meta.State, r meta.RouteRecord) api.Partition {
	// Bounds in text form: a database table's keys are encoded for routing.
	start, end := r.Route.Span.Bounds()
	p := api.Partition{
		ID: r.Route.ID, Changefeed: string(r.Route.Changefeed), Table: r.Route.Span.Table, Start: start, End: end,
		Node: string(r.Route.Node), Status: string(r.Route.Status), Epoch: r.Route.Epoch, Pinned: r.Route.Pinned,
	}
	if r.Route.Status == model.PartitionDraining {
		p.Target, p.SplitKey = string(r.Route.Target), model.DecodeKey(r.Route.Span.Key, r.Route.SplitKey)
		if t := r.Route.BusySince; !t.IsZero() {
			p.BusySince = &t
		}
	}
	if pr, ok := st.Progress[r.Route.Changefeed][r.Route.ID]; ok {
		p.CheckpointTs = uint64(pr.Progress.Checkpoint)
		// A split leaves the rows copied before it counted with the lower
		// half: said, so that neither half's count reads as its range's.
		counted := "rows"
		for _, ev := range r.Route.History {
			switch ev.Kind {
			case "split":
				counted = "rows, with the ranges split off it"
			case "split-from":
				counted = "rows since it was split off"
			}
		}
		switch c := pr.Progress.Copy; {
		case c.Done:
			p.Snapshot = fmt.Sprintf("done (%d %s)", c.Rows, counted)
		case c.To != "":
			after, _ := c.After()
			p.Snapshot = fmt.Sprintf("copied up to key %s (%d %s)", model.DecodeKey(r.Route.Span.Key, after), c.Rows, counted)
		case c.Cursor != "":
			p.Snapshot = fmt.Sprintf("copying in the key's index order, at key %s (%d rows of its range, %d read)", model.DecodeKey(r.Route.Span.Key, c.Cursor), c.Rows, c.Read)
		}
		if c := pr.Progress.Copy; !c.Done && c.Horizon != "" && p.Snapshot != "" {
			// Rows keyed after it were written after the copy began: the
			// stream carries them.
			p.Snapshot += fmt.Sprintf(", copying through key %s", model.DecodeKey(r.Route.Span.Key, c.Horizon))
		}
	}
	return p
}

// Partition finds a partition by its id (unique in the cluster).
func (b backend) Partition(ctx context.Context, id string) (*api.PartitionResponse, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	for _, cf := range st.ChangefeedIDs() {
		if r, ok := st.Partitions[cf][id]; ok {
			return &api.PartitionResponse{Version: api.SchemaVersion, Partition: partitionOf(st, r), History: append([]model.PartitionEvent{}, r.Route.History...)}, nil
		}
	}
	return nil, api.Errorf(api.CodeNotFound, "list them with 'cdcctl partition list'", "partition %s not found", id)
}

// leading returns the coordinator and its term, or an error when this
// node stopped leading while the request was forwarded to it.
func (b backend) leading() (*coordinator.Coordinator, election.Term, error) {
	_, inc := b.n.current()
	if inc == nil {
		return nil, election.Term{}, errNotJoined
	}
	term, ok := inc.Runner.Current()
	if !ok {
		return nil, election.Term{}, api.Errorf(api.CodeNotCoordinator, "try again", "%s is no longer the coordinator", b.n.cfg.NodeID)
	}
	return inc.Coordinator, term, nil
}

// engineError maps the engine's errors to the API's, in one place.
func engineError(err error, id string) error {
	switch {
	case errors.Is(err, coordinator.ErrInvalid):
		return api.Errorf(api.CodeBadRequest, "fix the request; see docs/cli.md for source and sink URIs", "%s",
			coordinator.Detail(err))
	case errors.Is(err, coordinator.ErrUnavailable):
		return api.Errorf(api.CodeUnavailable, unavailableHint, "%s", coordinator.Detail(err))
	case errors.Is(err, meta.ErrChangefeedExists):
		return api.Errorf(api.CodeConflict, "choose another name, or remove the existing one first", "changefeed %q already exists", id)
	case errors.Is(err, coordinator.ErrCleanupPending):
		return api.Errorf(api.CodeConflict, "wait until the removed changefeed's slot is dropped (the coordinator retries while the database is unreachable) or the create under way ends, or choose another name", "%s",
			coordinator.Detail(err))
	case errors.Is(err, coordinator.ErrClaimed):
		return api.Errorf(api.CodeConflict, "give the changefeed a name of its own, without a slot=, publication= or server-id= copied from another changefeed", "%s",
			coordinator.Detail(err))
	case errors.Is(err, coordinator.ErrUnresumable):
		return api.Errorf(api.CodeConflict, "choose what follows: 'cdcctl changefeed get "+id+"' shows the reason and the remedy (docs/mysql.md, docs/postgres.md)", "%s",
			coordinator.Detail(err))
	case errors.Is(err, coordinator.ErrNotPaused):
		return api.Errorf(api.CodeConflict, "pause it first (cdcctl changefeed pause "+id+"), then ask again; the message says what comes after", "%s",
			coordinator.Detail(err))
	case errors.Is(err, meta.ErrChangefeedNotFound):
		return notFound(id)
	case errors.Is(err, meta.ErrFenced):
		return api.Errorf(api.CodeNotCoordinator, "try again", "the coordinator changed during the request")
	case errors.Is(err, meta.ErrStale):
		return api.Errorf(api.CodeConflict, "try again", "the changefeed changed during the request")
	}
	return err
}

// unavailableHint is what to do about a database or a sink that could
// not be reached.
const unavailableHint = "check that it runs and that the coordinator can reach it, then send the same request again; the changefeed is as it was"

// createError is engineError for a create of source: a PostgreSQL
// create that could not reach what it needs also says what becomes of
// the slot it may have made. No other source makes one: MySQL's and
// Kafka's failed creates carried that hint too.
func createError(err error, id, source string) error {
	out := engineError(err, id)
	var ae *api.Error
	if u, perr := url.Parse(source); perr == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") && errors.As(out, &ae) && ae.Code == api.CodeUnavailable {
		ae.Hint += " (a replication slot the attempt made is dropped in the background, and a create of the same name is refused as pending until then)"
	}
	return out
}

// userOf is the authenticated user of a request, "" when the agent does
// not check tokens.
func userOf(ctx context.Context) string {
	if p, ok := api.PrincipalOf(ctx); ok {
		return p.User
	}
	return ""
}

func (b backend) CreateChangefeed(ctx context.Context, req api.ChangefeedCreateRequest) (*api.ChangefeedResponse, error) {
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	info, err := coord.CreateChangefeed(ctx, term, coordinator.CreateRequest{ID: req.ID, Source: req.Source, Sink: req.Sink, PartitionsPerTable: req.PartitionsPerTable, By: userOf(ctx)})
	if err != nil {
		return nil, createError(err, req.ID, req.Source)
	}
	return b.Changefeed(ctx, string(info.ID))
}

func (b backend) UpdateChangefeed(ctx context.Context, id string, req api.ChangefeedUpdateRequest) (*api.ChangefeedUpdateResponse, error) {
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	res, err := coord.UpdateChangefeed(ctx, term, coordinator.UpdateRequest{ID: model.ChangefeedID(id), Tables: req.Tables, SinkOptions: req.SinkOptions, CopyAgain: req.CopyAgain, Source: req.Source, DryRun: req.DryRun, By: userOf(ctx)})
	if err != nil {
		return nil, engineError(err, id)
	}
	return updateResponse(id, req.DryRun, res), nil
}

// ResnapshotChangefeed copies a failed or paused changefeed's tables
// again (coordinator.ResnapshotChangefeed).
func (b backend) ResnapshotChangefeed(ctx context.Context, id string, req api.ResnapshotRequest) (*api.ChangefeedUpdateResponse, error) {
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	res, err := coord.ResnapshotChangefeed(ctx, term, coordinator.ResnapshotRequest{ID: model.ChangefeedID(id), DryRun: req.DryRun, By: userOf(ctx)})
	if err != nil {
		return nil, engineError(err, id)
	}
	out := updateResponse(id, req.DryRun, res)
	out.Resnapshot = true
	return out, nil
}

// updateResponse is what an update or a re-snapshot did, or would do.
func updateResponse(id string, dryRun bool, res coordinator.UpdateResult) *api.ChangefeedUpdateResponse {
	out := &api.ChangefeedUpdateResponse{Version: api.SchemaVersion, Changefeed: id, DryRun: dryRun, Tables: res.Tables, Rules: res.Rules,
		Added: res.Added, Removed: res.Removed, CopiedAgain: res.CopiedAgain, Unpublished: res.Unpublished, RemovedPartitions: res.RemovedPartitions, At: uint64(res.At),
		Sink: redact.URI(res.Sink), SinkChanges: res.SinkChanges, SourceChanges: res.SourceChanges}
	if len(res.SourceChanges) > 0 {
		out.Source = sources.Redact(res.Source)
	}
	for i, sp := range res.AddedSpans {
		start, end := sp.Bounds()
		p := api.Partition{Changefeed: id, Table: sp.Table, Start: start, End: end, Status: string(model.PartitionActive)}
		if i < len(res.AddedPartitions) {
			p.ID = res.AddedPartitions[i]
		}
		out.AddedPartitions = append(out.AddedPartitions, p)
	}
	for _, r := range res.Rekeyed {
		out.Rekeyed = append(out.Rekeyed, api.RekeyedTable{Table: r.Table, From: r.From, To: r.To, Recut: r.Recut})
	}
	return out
}

func (b backend) PreviewChangefeed(ctx context.Context, req api.ChangefeedCreateRequest) (*api.ChangefeedPreview, error) {
	coord, _, err := b.leading()
	if err != nil {
		return nil, err
	}
	p, err := coord.PreviewChangefeed(ctx, coordinator.CreateRequest{ID: req.ID, Source: req.Source, Sink: req.Sink, PartitionsPerTable: req.PartitionsPerTable, By: userOf(ctx)})
	if err != nil {
		return nil, engineError(err, req.ID)
	}
	return &api.ChangefeedPreview{Version: api.SchemaVersion, Changefeed: req.ID, DryRun: true, Tables: p.Tables, Refused: p.Refused}, nil
}

func (b backend) SetChangefeedPaused(ctx context.Context, id string, paused bool, tables []string) (*api.ChangefeedResponse, error) {
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	state := model.ChangefeedNormal
	if paused {
		state = model.ChangefeedPaused
	}
	if err := coord.SetChangefeedState(ctx, term, model.ChangefeedID(id), state, userOf(ctx), tables...); err != nil {
		return nil, engineError(err, id)
	}
	return b.Changefeed(ctx, id)
}

func (b backend) RemoveChangefeed(ctx context.Context, id string) (*api.RemoveResponse, error) {
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	out := &api.RemoveResponse{Version: api.SchemaVersion, Removed: id}
	var pending *coordinator.CleanupPendingError
	if err := coord.RemoveChangefeed(ctx, term, model.ChangefeedID(id)); errors.As(err, &pending) {
		out.CleanupPending, out.CleanupError = true, pending.Err.Error()
	} else if err != nil {
		return nil, engineError(err, id)
	}
	// Its partitions' states in a bucket go too (in etcd they went with
	// the changefeed). The changefeed is removed whatever happens here: a
	// state left behind is garbage, never read again (a changefeed created
	// with the same name starts from scratch and overwrites what it hands
	// over), so a failure is a warning naming what to delete.
	if b.n.blobStates != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := b.n.blobStates.Forget(fctx, model.ChangefeedID(id)); err != nil {
			b.n.log.Warn("changefeed removed, but its partitions' states are still in the checkpoint store; delete them by hand",
				"changefeed", id, "prefix", b.n.blobStates.Prefix(model.ChangefeedID(id)), "err", err)
		}
	}
	return out, nil
}
