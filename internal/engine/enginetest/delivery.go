package enginetest

import (
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// CompareDelivery runs two changefeeds of the same load on three
// captures, "once" into onceSink (exactly once) and "least" into
// leastSink (at least once), lets fault hit the capture holding
// partitions of both, and verifies both: 0 lost and 0 out of order for
// both, 0 duplicates for "once". It returns both reports, so a test
// counts the at-least-once duplicates beside the exactly-once ones.
func CompareDelivery(c *Cluster, onceSink, leastSink string, fault func(victim model.NodeID)) (once, least verify.Report) {
	c.T.Helper()
	leader := c.StartCaptures(3)
	// 500 changes a second each: thousands in the run (its faults wait
	// out a session TTL), at half the CPU of 1,000, which the two
	// packages that run it paid in CI's time.
	const src = "gen://?tables=4&keys=100&rate=500"
	feeds := []model.ChangefeedID{"once", "least"}
	c.CreateChangefeed("once", src, onceSink, 2)
	c.CreateChangefeed("least", src, leastSink, 2)
	for _, cf := range feeds {
		c.Warm(cf, 1500*time.Millisecond)
	}
	victim := c.FollowerOf(leader.Node)
	for _, cf := range feeds {
		if on, _ := c.PartitionsOn(cf, victim); on == 0 {
			c.T.Fatalf("%s runs no partition of %s: the fault would prove nothing", victim, cf)
		}
	}
	fault(victim)
	for _, cf := range feeds {
		c.WaitCheckpoint(cf, model.TsFromTime(time.Now().Add(time.Second)))
	}
	once, least = c.PauseAndVerify("once"), c.PauseAndVerify("least")
	if !once.OK || once.Duplicates != 0 || once.Expected < 3000 {
		c.T.Fatalf("exactly once: %+v", once)
	}
	if !least.OK || least.Expected < 3000 {
		c.T.Fatalf("at least once: %+v", least)
	}
	return once, least
}

// CrashThenIsolate is CompareDelivery's hardest fault: victim is killed
// (kill -9) and its partitions run elsewhere; then a capture running a
// partition of cf is isolated past its session's TTL and let back once
// its partitions run elsewhere too (Isolate: a zombie).
func (c *Cluster) CrashThenIsolate(victim model.NodeID, cf model.ChangefeedID) {
	c.T.Helper()
	c.Crash(victim)
	c.RunOff(victim)
	for _, id := range c.IDs() {
		if on, _ := c.PartitionsOn(cf, id); on > 0 {
			c.Isolate(id)
			return
		}
	}
	c.T.Fatalf("no capture runs a partition of %s after the crash", cf)
}

// RunOff waits until no partition of any changefeed is placed on victim.
func (c *Cluster) RunOff(victim model.NodeID) {
	c.T.Helper()
	for _, cf := range c.State().ChangefeedIDs() {
		c.Eventually("the partitions of "+string(cf)+" run off "+string(victim), 60*time.Second, func() bool {
			on, _ := c.PartitionsOn(cf, victim)
			return on == 0
		})
	}
}

// Isolate cuts a capture off from etcd and from the other captures (as a
// SIGSTOPped agent looks to the cluster; in process it runs on) until
// its partitions run elsewhere, then lets it back: a zombie.
func (c *Cluster) Isolate(victim model.NodeID) {
	c.T.Helper()
	for _, id := range c.IDs() {
		if id != victim {
			c.Hub.Cut(victim, id)
		}
	}
	c.Link(victim).Freeze()
	c.RunOff(victim)
	time.Sleep(time.Second)
	c.Link(victim).Thaw()
	for _, id := range c.IDs() {
		if id != victim {
			c.Hub.Heal(victim, id)
		}
	}
}
