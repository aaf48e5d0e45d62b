package capture_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Every capture told to stop at the same moment (a playground's Ctrl-C)
// or a moment apart (a fleet's SIGTERMs), then started again, four times,
// under load: nothing is lost and nothing is written twice. Each capture's
// dispatchers hand their final positions to their changefeeds'
// maintainers, which are on captures stopping too: a maintainer stays
// until the partitions of its changefeeds on the other stopping captures
// have handed theirs over. Before, the capture that stopped last found no
// maintainer left, and its partitions resumed from their last persisted
// positions, writing again what they had written since.
func TestACaptureFleetStoppedAtOnceWritesNothingTwice(t *testing.T) {
	t.Parallel()
	c, feeds := loadedCluster(t)
	for round := 0; round < 4; round++ {
		ids := c.IDs()
		// Together, then 10, 20 and 200 ms apart: captures still Alive
		// when the first stop, given their partitions and maintainers
		// a moment before they stop too.
		c.StopApart([]time.Duration{0, 10, 20, 200}[round]*time.Millisecond, ids...)
		for _, id := range ids {
			c.Start(string(id))
		}
		// Running again, and each changefeed a second further.
		again := model.TsFromTime(time.Now().Add(time.Second))
		for _, id := range feeds {
			c.WaitCheckpoint(id, again)
		}
	}
	c.VerifyAll(true) // fails the test on any event lost or written twice
}
