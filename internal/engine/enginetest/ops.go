package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// The operations below are what an operator asks through the API, called
// on the elected coordinator the way the agent's API backend calls it.

// opTimeout bounds one operation, as cdcctl's default request timeout
// does: a write on a loaded machine can take more than 10 s.
const opTimeout = 30 * time.Second

// Coordinate runs op with the coordinator that leads now and its term,
// and runs it again with the next one if the term ended under it (the
// API client retries a request that reached a former coordinator).
func (c *Cluster) Coordinate(op func(context.Context, *coordinator.Coordinator, election.Term) error) error {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for {
		coord, term := c.leading(ctx)
		err := op(ctx, coord, term)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if now, ok := c.currentTerm(); ok && now == term {
			return err // the term held: the refusal is the answer
		}
	}
}

// leading waits for a running capture that leads.
func (c *Cluster) leading(ctx context.Context) (*coordinator.Coordinator, election.Term) {
	c.T.Helper()
	for {
		for _, r := range c.captures {
			if inc := r.capture.Current(); inc != nil {
				if term, ok := inc.Runner.Current(); ok {
					return inc.Coordinator, term
				}
			}
		}
		select {
		case <-ctx.Done():
			c.T.Fatalf("no capture leads: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Cluster) currentTerm() (election.Term, bool) {
	for _, r := range c.captures {
		if inc := r.capture.Current(); inc != nil {
			if term, ok := inc.Runner.Current(); ok {
				return term, true
			}
		}
	}
	return election.Term{}, false
}

// CreateChangefeed creates a changefeed, failing the test if it is
// refused.
func (c *Cluster) CreateChangefeed(id, source, sink string, partitionsPerTable int) model.ChangefeedInfo {
	c.T.Helper()
	var info model.ChangefeedInfo
	err := c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		var err error
		info, err = coord.CreateChangefeed(ctx, term, coordinator.CreateRequest{ID: id, Source: source, Sink: sink, PartitionsPerTable: partitionsPerTable})
		return err
	})
	if err != nil {
		c.T.Fatalf("create changefeed %s: %v", id, err)
	}
	return info
}

// Changefeed is a changefeed as etcd holds it now.
func (c *Cluster) Changefeed(id model.ChangefeedID) *meta.ChangefeedEntry {
	c.T.Helper()
	e, ok := c.State().Changefeeds[id]
	if !ok {
		c.T.Fatalf("changefeed %s not found", id)
	}
	return e
}

// WaitCheckpoint waits until a changefeed's checkpoint passes ts and
// returns it.
func (c *Cluster) WaitCheckpoint(cf model.ChangefeedID, ts model.Ts) model.Ts {
	c.T.Helper()
	var cp model.Ts
	// 60 s: for a machine running this package beside the others; the
	// pace itself is measured by benchmarks, not here.
	c.Eventually("checkpoint of "+string(cf)+" passes "+ts.String(), 60*time.Second, func() bool {
		e, ok := c.State().Changefeeds[cf]
		if ok {
			cp = e.Status.CheckpointTs
		}
		return ok && cp > ts
	})
	return cp
}

// Warm waits until a changefeed's checkpoint is d past its start.
func (c *Cluster) Warm(cf model.ChangefeedID, d time.Duration) model.Ts {
	c.T.Helper()
	return c.WaitCheckpoint(cf, c.Changefeed(cf).Info.StartTs+model.TsFromMillis(d.Milliseconds()))
}

// SetState pauses or resumes a changefeed.
func (c *Cluster) SetState(cf model.ChangefeedID, state model.ChangefeedState) {
	c.T.Helper()
	err := c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		return coord.SetChangefeedState(ctx, term, cf, state, "test")
	})
	if err != nil {
		c.T.Fatalf("set %s %s: %v", cf, state, err)
	}
}

// UpdateTables changes a changefeed's tables to tables as 'cdcctl
// changefeed update' does: paused, updated, resumed.
func (c *Cluster) UpdateTables(cf model.ChangefeedID, tables ...string) {
	c.T.Helper()
	c.UpdateTablesInOnePause(cf, tables)
}

// UpdateTablesInOnePause changes a changefeed's tables to each of steps in
// turn in one pause, as an operator's remedy does (a table removed, then
// added back, before the changefeed resumes).
func (c *Cluster) UpdateTablesInOnePause(cf model.ChangefeedID, steps ...[]string) {
	c.T.Helper()
	c.SetState(cf, model.ChangefeedPaused)
	for _, tables := range steps {
		c.UpdatePaused(cf, tables)
	}
	c.SetState(cf, model.ChangefeedNormal)
}

// UpdatePaused changes a paused changefeed's tables, as 'cdcctl
// changefeed update' does.
func (c *Cluster) UpdatePaused(cf model.ChangefeedID, tables []string) {
	c.T.Helper()
	c.updatePaused(coordinator.UpdateRequest{ID: cf, Tables: tables, By: "test"})
}

// CopyAgain copies tables of a changefeed again, keeping its tables, as
// 'cdcctl changefeed update --copy-table' does: paused, updated, resumed.
func (c *Cluster) CopyAgain(cf model.ChangefeedID, tables []string, again ...string) {
	c.T.Helper()
	c.SetState(cf, model.ChangefeedPaused)
	c.updatePaused(coordinator.UpdateRequest{ID: cf, Tables: tables, CopyAgain: again, By: "test"})
	c.SetState(cf, model.ChangefeedNormal)
}

// UpdateSource asks for a paused changefeed to take the connection of
// uri (coordinator.UpdateRequest.Source): what it changed, or would in a
// dry run, or why it was refused.
func (c *Cluster) UpdateSource(cf model.ChangefeedID, uri string, dryRun bool) (res coordinator.UpdateResult, err error) {
	c.T.Helper()
	err = c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		res, err = coord.UpdateChangefeed(ctx, term, coordinator.UpdateRequest{ID: cf, Source: uri, DryRun: dryRun, By: "test"})
		return err
	})
	return res, err
}

// GiveNewPassword gives a paused changefeed, whose source's password was
// rotated upstream, the new one by an update of its source's connection,
// as an operator would: first asked with a wrong one (as withPassword
// writes the URI), which must be refused without a change or the
// password shown, then with the right one, which must change the
// password alone.
func (c *Cluster) GiveNewPassword(cf model.ChangefeedID, withPassword func(string) string, wrong, right string) {
	c.T.Helper()
	stored := c.Changefeed(cf).Info.SourceURI
	if _, err := c.UpdateSource(cf, withPassword(wrong), false); err == nil || !strings.Contains(err.Error(), "keeps its connection") || strings.Contains(err.Error(), wrong) {
		c.T.Fatalf("a wrong password: %v; want a refusal that names no password", err)
	}
	if c.Changefeed(cf).Info.SourceURI != stored {
		c.T.Fatalf("a refused connection was stored")
	}
	res, err := c.UpdateSource(cf, withPassword(right), true)
	if err != nil || !slices.Equal(res.SourceChanges, []string{"password: changed"}) {
		c.T.Fatalf("dry run: %v, %q", err, res.SourceChanges)
	}
	if c.Changefeed(cf).Info.SourceURI != stored {
		c.T.Fatalf("a dry run stored the connection")
	}
	if _, err := c.UpdateSource(cf, withPassword(right), false); err != nil {
		c.T.Fatal(err)
	}
}

// updatePaused makes an update of a paused changefeed, failing the test
// if it is refused.
func (c *Cluster) updatePaused(req coordinator.UpdateRequest) {
	c.T.Helper()
	err := c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		_, err := coord.UpdateChangefeed(ctx, term, req)
		return err
	})
	if err != nil {
		c.T.Fatalf("update %s (tables %v, copied again %v): %v", req.ID, req.Tables, req.CopyAgain, err)
	}
}

// LeaveRefollow writes what a coordinator that stopped in the middle of
// a change of a changefeed's tables leaves behind: the changefeed paused
// with the change's record, r.Done of its steps made (by the test,
// before).
func (c *Cluster) LeaveRefollow(cf model.ChangefeedID, r model.Refollow) {
	c.T.Helper()
	err := c.Coordinate(func(ctx context.Context, _ *coordinator.Coordinator, term election.Term) error {
		for {
			// Its dispatchers stopping after a pause write its status.
			st, err := c.Store.LoadChangefeed(ctx, cf)
			if err != nil {
				return err
			}
			r.Run = &st.Changefeeds[cf].Status.Run
			err = c.Store.PauseToRefollow(ctx, term.Fence, st.Changefeeds[cf], r)
			if !errors.Is(err, meta.ErrStale) {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if err != nil {
		c.T.Fatalf("leave %s paused for %s: %v", cf, r.By, err)
	}
}

// Generator is the generator behind a gen:// source URI: what the
// changefeed reads, to pick keys from or to verify against.
func (c *Cluster) Generator(source string) *gen.Generator {
	c.T.Helper()
	cfg, err := gen.ParseURI(source)
	if err != nil {
		c.T.Fatal(err)
	}
	g, err := gen.New(cfg)
	if err != nil {
		c.T.Fatal(err)
	}
	return g
}

// PauseAndVerify pauses a changefeed (every dispatcher stops gracefully,
// the checkpoint is exact) and proves its sink holds every event of its
// generator up to the checkpoint, in per-key order.
func (c *Cluster) PauseAndVerify(cf model.ChangefeedID) verify.Report {
	c.T.Helper()
	c.SetState(cf, model.ChangefeedPaused)
	// Paused dispatchers stop gracefully and leave an exact checkpoint.
	time.Sleep(2 * time.Second)
	return c.VerifyPaused(cf)
}

// VerifyPaused verifies a paused changefeed's sink up to its checkpoint.
func (c *Cluster) VerifyPaused(cf model.ChangefeedID) verify.Report {
	c.T.Helper()
	e := c.Changefeed(cf)
	ctx := context.Background()
	check := verify.Storage
	if strings.HasPrefix(e.Info.SinkURI, "kafka://") {
		check = verify.Kafka
	}
	rep, err := check(ctx, c.Generator(e.Info.SourceURI), e.Info.SinkURI, e.Status.CheckpointTs)
	if err != nil {
		c.T.Fatalf("verify %s: %v", cf, err)
	}
	return rep
}

// VerifyAll pauses every changefeed and proves each sink holds every
// event in per-key order; exactlyOnce also demands no duplicates (a
// crashed capture may legitimately have written some twice). It returns
// the duplicates it counted.
func (c *Cluster) VerifyAll(exactlyOnce bool) uint64 {
	c.T.Helper()
	ids := c.State().ChangefeedIDs()
	for _, id := range ids {
		c.SetState(id, model.ChangefeedPaused)
	}
	time.Sleep(2 * time.Second)
	var dups uint64
	for _, id := range ids {
		rep := c.VerifyPaused(id)
		if !rep.OK || rep.Lost != 0 || (exactlyOnce && rep.Duplicates != 0) {
			c.T.Fatalf("%s: %+v", id, rep)
		}
		dups += uint64(rep.Duplicates)
	}
	return dups
}

// Feeds creates n changefeeds cf00.. of a light load (2 tables of 50
// keys, Options.FeedRate changes a second, 2 partitions a table), each
// into its own file sink.
func (c *Cluster) Feeds(n int) []model.ChangefeedID {
	c.T.Helper()
	dir := c.T.TempDir()
	var out []model.ChangefeedID
	for i := range n {
		name := fmt.Sprintf("cf%02d", i)
		c.CreateChangefeed(name, fmt.Sprintf("gen://?tables=2&keys=50&rate=%d", c.Opts.FeedRate), "file://"+dir+"/"+name+"?flush-interval=1s", 2)
		out = append(out, model.ChangefeedID(name))
	}
	return out
}

// RemoveChangefeed removes a changefeed, and its partitions' states from
// the checkpoint store if that is a bucket, as the agent does.
func (c *Cluster) RemoveChangefeed(cf model.ChangefeedID) {
	c.T.Helper()
	err := c.Coordinate(func(ctx context.Context, coord *coordinator.Coordinator, term election.Term) error {
		return coord.RemoveChangefeed(ctx, term, cf)
	})
	if err != nil {
		c.T.Fatalf("remove %s: %v", cf, err)
	}
	if b, ok := c.Opts.Checkpoints.(*checkpoint.Blob); ok {
		if err := b.Forget(context.Background(), cf); err != nil {
			c.T.Fatalf("forget the states of %s: %v", cf, err)
		}
	}
}

// RewriteStatus writes a changefeed's status again as it is: only its
// revision moves, as a dispatcher's late report moves it (a write of the
// coordinator's that read it before then meets a stale status). For a
// WriteHook's action.
func (c *Cluster) RewriteStatus(ctx context.Context, cf model.ChangefeedID) error {
	key := meta.NewKeys(ClusterID).ChangefeedStatus(cf)
	got, err := c.Client.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(got.Kvs) != 1 {
		return fmt.Errorf("no status of changefeed %s", cf)
	}
	_, err = c.Client.Put(ctx, key, string(got.Kvs[0].Value))
	return err
}
