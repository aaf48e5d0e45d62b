package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
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
}

// MaxPartitionsPerTable bounds the routing table of one table.
const MaxPartitionsPerTable = 64

// CreateChangefeed validates a request, checks that the sink can be
// reached, and writes the changefeed with its routing table. Nothing is
// written when anything is wrong.
func (c *Coordinator) CreateChangefeed(ctx context.Context, term election.Term, req CreateRequest) (model.ChangefeedInfo, error) {
	if err := model.ValidateChangefeedID(req.ID); err != nil {
		return model.ChangefeedInfo{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if req.PartitionsPerTable == 0 {
		req.PartitionsPerTable = 4
	}
	if req.PartitionsPerTable < 1 || req.PartitionsPerTable > MaxPartitionsPerTable {
		return model.ChangefeedInfo{}, fmt.Errorf("%w: partitions per table must be between 1 and %d, got %d", ErrInvalid, MaxPartitionsPerTable, req.PartitionsPerTable)
	}
	cfg, err := gen.ParseURI(req.Source)
	if err != nil {
		return model.ChangefeedInfo{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	now := time.Now()
	if cfg.StartMillis == 0 {
		// Pin the stream: every node, and verify, must read the same one.
		cfg.StartMillis = now.UnixMilli()
	}
	g, err := gen.New(cfg)
	if err != nil {
		return model.ChangefeedInfo{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := registry.Validate(req.Sink); err != nil {
		return model.ChangefeedInfo{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}

	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	sk, err := registry.Open(octx, req.Sink, c.log)
	cancel()
	if err != nil {
		return model.ChangefeedInfo{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	_ = sk.Close()
	info := model.ChangefeedInfo{
		ID: model.ChangefeedID(req.ID), SourceURI: cfg.URI(), SinkURI: req.Sink,
		PartitionsPerTable: req.PartitionsPerTable, StartTs: g.TableVersion(0), CreatedAt: now.UTC(),
	}
	var spans []model.Span
	bounds := g.Boundaries(req.PartitionsPerTable)
	for _, t := range g.Tables() {
		spans = append(spans, model.SplitEvenly(t, len(bounds)+1, func(i int) string { return bounds[i-1] })...)
	}
	if _, err := c.store.CreateChangefeed(ctx, term.Fence, info, spans); err != nil {
		return model.ChangefeedInfo{}, err
	}
	c.log.Info("coordinator: changefeed created", "changefeed", info.ID, "partitions", len(spans), "sink", info.SinkURI)
	return info, nil
}

// RemoveChangefeed deletes a changefeed; its dispatchers stop.
func (c *Coordinator) RemoveChangefeed(ctx context.Context, term election.Term, id model.ChangefeedID) error {
	return c.store.RemoveChangefeed(ctx, term.Fence, id)
}

// SetChangefeedState pauses (dispatchers stop gracefully, the checkpoint
// stays exact) or resumes a changefeed.
func (c *Coordinator) SetChangefeedState(ctx context.Context, term election.Term, id model.ChangefeedID, state model.ChangefeedState) error {
	// The maintainer writes the status (checkpoint) often; read again and
	// retry when it moved under us.
	for attempt := 0; ; attempt++ {
		st, err := c.store.Load(ctx)
		if err != nil {
			return err
		}
		e, ok := st.Changefeeds[id]
		if !ok {
			return fmt.Errorf("%w: %s", meta.ErrChangefeedNotFound, id)
		}
		if e.Status.State == state {
			return nil
		}
		err = c.store.SetChangefeedState(ctx, term.Fence, e, state)
		if !errors.Is(err, meta.ErrStale) || attempt >= 20 {
			return err
		}
	}
}

// placeMaintainers gives every changefeed whose maintainer has no live node
// a schedulable node, the one with the fewest maintainers.
func (c *Coordinator) placeMaintainers(ctx context.Context, term election.Term, st *meta.State) error {
	dest := plan.NewDestinations(st.SchedulableNodeIDs())
	for _, e := range st.Changefeeds {
		dest.Count(e.Maintainer.Node)
	}
	var firstErr error
	for _, id := range st.ChangefeedIDs() {
		e := st.Changefeeds[id]
		if _, registered := st.Nodes[e.Maintainer.Node]; registered && e.Maintainer.Node != "" {
			continue
		}
		node, ok := dest.Next()
		if !ok {
			return nil // no schedulable node; placed when one appears
		}
		if err := c.store.PlaceMaintainer(ctx, term.Fence, e, node); err != nil {
			if errors.Is(err, meta.ErrFenced) {
				return err
			}
			if firstErr == nil && !errors.Is(err, meta.ErrStale) {
				firstErr = err
			}
			continue
		}
		c.log.Info("coordinator: maintainer placed", "changefeed", id, "node", node, "epoch", e.Maintainer.Epoch+1)
	}
	return firstErr
}
