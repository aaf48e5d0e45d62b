package capture_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A service manager's restart: a capture stops gracefully and its process
// starts again at once under the same id, while its partitions still name
// that id, each capture in turn and the coordinator's last, twice, under
// load. Nothing is lost and nothing is written twice: the new process
// runs none of the placements made on the old one (their maintainers
// place them again from where it stopped), and every partition ends up
// placed on a running process. Before that rule, the new process started
// the old placements while their maintainer placed them elsewhere, and
// both wrote them (3 to 8 events twice, in about one loop of four).
func TestACaptureRestartedUnderItsOwnIDWritesNothingTwice(t *testing.T) {
	t.Parallel()
	c, feeds := loadedCluster(t)
	placedOnRunning := func() bool {
		st := c.State()
		for _, cf := range feeds {
			for _, r := range st.Partitions[cf] {
				if r.Route.Status != model.PartitionActive || !st.PlacedOnIncarnation(r) {
					return false
				}
			}
		}
		return true
	}
	for round := 0; round < 2; round++ {
		leader := c.WaitLeader().Node
		order := []model.NodeID{}
		for _, id := range c.IDs() {
			if id != leader {
				order = append(order, id)
			}
		}
		for _, id := range append(order, leader) {
			if err := c.Stop(id); err != nil {
				t.Fatalf("stop %s: %v", id, err)
			}
			c.Start(string(id))
			c.Eventually("every partition placed on a running capture after "+string(id)+" restarted", time.Minute, placedOnRunning)
		}
	}
	c.VerifyAll(true)
}

// loadedCluster is three captures running four light changefeeds, each
// a second past its start.
func loadedCluster(t *testing.T) (*enginetest.Cluster, []model.ChangefeedID) {
	c := enginetest.New(t, enginetest.Options{})
	c.StartCaptures(3)
	feeds := c.Feeds(4)
	for _, id := range feeds {
		c.Warm(id, time.Second)
	}
	return c, feeds
}
