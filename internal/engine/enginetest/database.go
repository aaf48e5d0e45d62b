package enginetest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Helpers for changefeeds whose source is a database: its partitions are
// key ranges of tables, each copies its range (the snapshot), and its
// sink is proved by rebuilding the tables and comparing them with the
// upstream's.

// PartitionFrom is the routing entry of a table's partition whose range
// starts at start (in text form; "" for the first), once it is placed on
// a capture: a plan computed from an unplaced partition is refused "not
// placed yet", and one computed again after it was placed may find it
// already where the test wanted it. It fails the test when no such
// partition is placed within 30 s.
func (c *Cluster) PartitionFrom(cf model.ChangefeedID, table, start string) model.RouteEntry {
	c.T.Helper()
	var found model.RouteEntry
	c.Eventually("the partition of "+table+" from "+start+" placed", 30*time.Second, func() bool {
		for _, r := range c.State().Partitions[cf] {
			if s, _ := r.Route.Span.Bounds(); r.Route.Span.Table == table && s == start && r.Route.Node != "" {
				found = r.Route
				return true
			}
		}
		return false
	})
	return found
}

// CopySummary says how far a changefeed's snapshot is, from its
// partitions' copy progress in etcd, as 'cdcctl changefeed get' shows it.
func (c *Cluster) CopySummary(cf model.ChangefeedID) string {
	c.T.Helper()
	st := c.State()
	pt := model.ProgressTable{}
	for pid := range st.Partitions[cf] {
		pt[pid] = st.Progress[cf][pid].Progress
	}
	return model.CopySummary(pt)
}

// CopyUnderWay waits until partition pid of cf has saved part of its
// copy in etcd and returns that progress; it fails the test if the copy
// is already done (a scenario that acts while a partition copies would
// prove nothing: its table wants to be larger).
func (c *Cluster) CopyUnderWay(cf model.ChangefeedID, pid string) model.CopyProgress {
	c.T.Helper()
	var saved model.CopyProgress
	c.Eventually("the partition to save some of its copy", 30*time.Second, func() bool {
		saved = c.State().Progress[cf][pid].Progress.Copy
		return saved.To != "" || saved.Cursor != ""
	})
	if saved.Done {
		c.T.Fatalf("partition %s of %s finished its copy before the test could act on it (make the table larger): %+v", pid, cf, saved)
	}
	return saved
}

// WaitSnapshot waits until every partition of a changefeed has copied
// its range. Two minutes: the scenarios copy in chunks of 10 to 40 rows
// so that they can act while partitions copy on an idle machine, and a
// loaded one (CI's -race run on two cores) copies several times slower.
func (c *Cluster) WaitSnapshot(cf model.ChangefeedID) {
	c.T.Helper()
	c.Eventually("the initial snapshot of "+string(cf)+" to finish", 2*time.Minute, func() bool {
		return strings.HasPrefix(c.CopySummary(cf), "done")
	})
}

// TimeSnapshot creates changefeed id of sourceURI into files in dir
// (flushed every 100 ms) with parts partitions, waits until its initial
// snapshot is done, checks that it copied rows rows, removes it, and
// returns how long creation to done took: what the snapshot benchmarks
// of the database sources measure.
func (c *Cluster) TimeSnapshot(id model.ChangefeedID, sourceURI, dir string, parts, rows int) time.Duration {
	c.T.Helper()
	began := time.Now()
	c.CreateChangefeed(string(id), sourceURI, "file://"+dir+"?flush-interval=100ms", parts)
	c.WaitSnapshot(id)
	took := time.Since(began)
	if s := c.CopySummary(id); !strings.Contains(s, fmt.Sprintf("(%d rows copied)", rows)) {
		c.T.Fatalf("the snapshot of %s says %q, want %d rows copied", id, s, rows)
	}
	c.RemoveChangefeed(id)
	return took
}

// VerifyDatabase waits until a changefeed's checkpoint passes end (the
// workload's last commit, or now) and rebuilds tables from its sink to
// compare them with the upstream's.
func (c *Cluster) VerifyDatabase(cf model.ChangefeedID, up verify.Upstream, tables []string, end time.Time) verify.Report {
	c.T.Helper()
	c.WaitCheckpoint(cf, model.TsFromTime(end.Add(100*time.Millisecond)))
	wait := func(_ context.Context, ts model.Ts) (model.Ts, error) { return c.WaitCheckpoint(cf, ts), nil }
	rep, err := verify.Database(context.Background(), c.Changefeed(cf).Info.SinkURI, up, tables, wait)
	if err != nil {
		c.T.Fatalf("verify %s against its upstream: %v", cf, err)
	}
	return rep
}

// NotCoordinator hands the coordinator's role on if node holds it, as
// 'cdcctl coordinator resign' does: a drain does not drain the
// coordinator.
func (c *Cluster) NotCoordinator(node model.NodeID) {
	c.T.Helper()
	c.Eventually("a coordinator other than "+string(node), 30*time.Second, func() bool {
		l, ok := c.Leader()
		if ok && l.Node != node {
			return true
		}
		if r := c.captures[node]; ok && r != nil {
			if inc := r.capture.Current(); inc != nil {
				if _, leading := inc.Runner.Current(); leading {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := inc.Runner.Resign(ctx); err != nil {
						c.T.Logf("resign %s: %v", node, err)
					}
					time.Sleep(200 * time.Millisecond) // another campaigner's turn
				}
			}
		}
		return false
	})
}

// MaintainerOf waits until a changefeed's maintainer (and with it a
// database changefeed's reader) is placed, and names its capture.
func (c *Cluster) MaintainerOf(cf model.ChangefeedID) model.NodeID {
	c.T.Helper()
	var node model.NodeID
	c.Eventually("the maintainer of "+string(cf)+" to be placed", 30*time.Second, func() bool {
		if e, ok := c.State().Changefeeds[cf]; ok {
			node = e.Maintainer.Node
		}
		return node != ""
	})
	return node
}

// Inserts lists every insert of a table's keys in a changefeed's sink
// (verify.Inserts): by key, each writer and position.
func (c *Cluster) Inserts(cf model.ChangefeedID, table string) map[string][]string {
	c.T.Helper()
	out, err := verify.Inserts(context.Background(), c.Changefeed(cf).Info.SinkURI, table)
	if err != nil {
		c.T.Fatalf("read the inserts of %s from the sink of %s: %v", table, cf, err)
	}
	return out
}

// InsertedOnce fails the test unless the sink of cf inserted each of a
// table's keys once, and want keys in all (a graceful run: none copied
// and streamed too, none written again).
func (c *Cluster) InsertedOnce(cf model.ChangefeedID, table string, want int64) {
	c.T.Helper()
	all, twice := c.Inserts(cf, table), 0
	for k, by := range all {
		if len(by) != 1 {
			if twice++; twice <= 5 {
				c.T.Errorf("%s: key %s was inserted %d times: %v", table, k, len(by), by)
			}
		}
	}
	if twice > 0 || int64(len(all)) != want {
		c.T.Fatalf("the sink of %s inserted %d keys of %s, %d of them more than once; want each of %d once", cf, len(all), table, twice, want)
	}
}
