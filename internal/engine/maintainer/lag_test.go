package maintainer_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/maintainer"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A changefeed's lag is measured against its checkpoint as etcd holds
// it, so the time between checkpoint writes is part of every lag: a
// host of a few changefeeds writes each one's several times a second
// (checkpointEvery), where it wrote it once a PersistInterval. Counted,
// not timed: the test fails only if no more advances arrive than one a
// PersistInterval would give (here about six times as many do).
func TestASmallChangefeedsCheckpointAdvancesSeveralTimesAPersistInterval(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	c.StartCaptures(2)
	c.CreateChangefeed("lag", "gen://?tables=2&keys=20&rate=40", "file://"+t.TempDir()+"?flush-interval=200ms", 2)
	c.Eventually("the changefeed checkpoints", 60*time.Second, func() bool {
		e := c.State().Changefeeds["lag"]
		return e != nil && e.Status.CheckpointTs > 0
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := meta.NewKeys(enginetest.ClusterID).ChangefeedStatus("lag")
	const window = 5 * maintainer.PersistInterval
	began := time.Now()
	var last model.Ts
	advances := 0
	for resp := range c.Client.Watch(ctx, key) {
		for _, ev := range resp.Events {
			var st model.ChangefeedStatus
			if err := json.Unmarshal(ev.Kv.Value, &st); err != nil {
				t.Fatal(err)
			}
			if st.CheckpointTs > last {
				last, advances = st.CheckpointTs, advances+1
			}
		}
		if time.Since(began) >= window {
			cancel()
		}
	}
	took := time.Since(began)
	if most := int(took/maintainer.PersistInterval) + 1; advances <= most {
		t.Fatalf("the checkpoint advanced %d times in %v; one write a PersistInterval gives at most %d, and a host of one changefeed writes it every 100 ms", advances, took.Round(time.Millisecond), most)
	}
	t.Logf("%d advances in %v", advances, took.Round(time.Millisecond))
}
