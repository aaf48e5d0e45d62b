package maintainer_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A split whose partition's node is cut off before it stops the
// partition (seed 003: the source dies during the migration), into an
// exactly-once sink. Cut off from etcd, the node goes on writing files
// until its lease runs out, past the last checkpoint it could persist;
// the maintainer then cuts the partition at that checkpoint. The lower
// half keeps the partition's id and resumes after the sink's record of
// it; the upper half is new, with no record of its own, and started at
// the checkpoint: it wrote again the rows of its keys that the whole had
// written meanwhile (found by TestChaosFoundThese, seed 20263210, with
// every session expired). Both halves now start after what the sink
// holds of the whole, and the sink holds every event once.
func TestASplitWhoseNodeWasCutOffIsExactlyOnce(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{EtcdLinks: true})
	leader := c.StartCaptures(3)
	c.CreateChangefeed("demo", "gen://?tables=2&keys=200&rate=400", "file://"+t.TempDir()+"?flush-interval=100ms&delivery=exactly-once", 2)
	c.Warm("demo", time.Second)
	st := c.State()
	host := st.Changefeeds["demo"].Maintainer.Node
	var p model.RouteEntry
	for _, r := range st.SortedPartitions("demo") {
		if n := r.Route.Node; n != host && n != leader.Node && r.Route.Status == model.PartitionActive {
			p = r.Route
			break
		}
	}
	if p.ID == "" {
		// Every partition on the maintainer's or the coordinator's
		// capture: move one to the third.
		for _, id := range c.IDs() {
			if id != host && id != leader.Node {
				r := st.SortedPartitions("demo")[0].Route
				c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Move(s, r.ID, id, plan.DefaultCosts) })
				p = c.State().Partitions["demo"][r.ID].Route
			}
		}
	}
	key := ""
	for _, k := range []string{"g", "t", "d", "w"} {
		if p.Span.ValidSplitKey(k) == nil {
			key = k
			break
		}
	}
	victim := p.Node
	before := c.State().Progress["demo"][p.ID].Progress.Checkpoint
	for _, id := range c.IDs() {
		if id != victim {
			c.Hub.Cut(victim, id)
		}
	}
	c.Link(victim).Freeze()
	rec := c.ApplyPlan(func(s *model.Snapshot) (*plan.Plan, error) { return plan.Split(s, p.ID, key, plan.DefaultCosts) })
	c.Link(victim).Thaw()
	for _, id := range c.IDs() {
		if id != victim {
			c.Hub.Heal(victim, id)
		}
	}
	st = c.State()
	var upper model.RouteEntry
	for _, r := range st.Partitions["demo"] {
		if r.Route.Span.Table == p.Span.Table && r.Route.Span.Start == key {
			upper = r.Route
		}
	}
	if upper.ID == "" || len(upper.History) == 0 || upper.History[0].Graceful {
		t.Fatalf("no upper half split without its node (plan %s): %+v", rec.ID, upper)
	}
	c.WaitCheckpoint("demo", model.TsFromTime(time.Now().Add(time.Second)))
	rep := c.PauseAndVerify("demo")
	if !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 || rep.Expected < 3000 {
		t.Fatalf("a split of %s at %q whose node %s was cut off (checkpoint %s before): %+v", p.ID, key, victim, before, rep)
	}
	t.Logf("split %s at %q without %s: upper half %s; %d events, 0 lost, 0 twice", p.ID, key, victim, upper.ID, rep.Expected)
}
