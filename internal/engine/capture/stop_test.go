package capture_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Every capture told to stop at the same moment (a playground's Ctrl-C,
// a whole fleet's SIGTERM), then started again, three times, under load:
// nothing is lost and nothing is written twice. Each capture's
// dispatchers hand their final positions to their changefeeds'
// maintainers, which are on captures stopping too: a maintainer stays
// until the partitions of its changefeeds on the other stopping captures
// have handed theirs over. Before, the capture that stopped last found no
// maintainer left, and its partitions resumed from their last persisted
// positions, writing again what they had written since.
func TestACaptureFleetStoppedAtOnceWritesNothingTwice(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	c.StartCaptures(3)
	feeds := c.Feeds(4)
	for _, id := range feeds {
		c.Warm(id, time.Second)
	}
	for round := 0; round < 3; round++ {
		ids := c.IDs()
		c.StopTogether(ids...)
		for _, id := range ids {
			c.Start(string(id))
		}
		// Running again, and each changefeed a second further.
		again := model.TsFromTime(time.Now().Add(time.Second))
		for _, id := range feeds {
			c.WaitCheckpoint(id, again)
		}
	}
	if dups := c.VerifyAll(true); dups != 0 {
		t.Fatalf("%d events written twice", dups)
	}
}
