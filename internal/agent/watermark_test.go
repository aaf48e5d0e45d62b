package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Seed 004's downstream completeness on Kafka: the maintainer sends each
// checkpoint it persists as a canal-json TIDB_WATERMARK to every
// partition. A consumer that trusts only the watermarks finds every row
// up to a watermark before it: the rows read before each partition's
// last watermark, taken together, hold every row of the source up to the
// lowest of those watermarks, read while the changefeed runs.
func TestAKafkaConsumerOfTheWatermarksSeesCompleteTables(t *testing.T) {
	t.Parallel()
	kc, err := kafkatest.Start(1, "demo", 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	tc := newTestCluster(t)
	tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	sinkURI := fmt.Sprintf("kafka://%s/demo?partition-num=4", kc.Addrs())
	created, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "demo", Source: "gen://?tables=6&keys=100&rate=1500&ddl_every=2s", Sink: sinkURI, PartitionsPerTable: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := tc.generator(created.Source)
	cfg, err := kafka.ParseURI(sinkURI)
	if err != nil {
		t.Fatal(err)
	}
	checks := 0
	var last model.Ts
	// Three advances, each checked; the deadline is for a machine that is
	// slow, not a measure of the pace.
	// The bound is generous: what is proven is what the watermarks
	// promise, not how fast they come (a starved CI machine has taken
	// 90 s for two advances).
	for deadline := time.Now().Add(4 * time.Minute); checks < 3 && time.Now().Before(deadline); time.Sleep(time.Second) {
		// Per partition: the rows before its last watermark, and that
		// watermark.
		pending := map[int32][]verify.Row{}
		var confirmed []verify.Row
		marks := map[int32]model.Ts{}
		err := kafka.Scan(ctx, cfg, func(p int32, kind codec.MessageKind, r codec.Row, ts model.Ts) error {
			switch kind {
			case codec.MessageWatermark:
				if ts < marks[p] {
					return fmt.Errorf("partition %d: watermark %v after %v", p, ts, marks[p])
				}
				marks[p] = ts
				confirmed = append(confirmed, pending[p]...)
				pending[p] = nil
			case codec.MessageRow:
				pending[p] = append(pending[p], verify.Row{Table: r.Table, Key: r.Key, Version: r.Version, CommitTs: r.CommitTs, Value: r.Value})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(marks) < 4 {
			continue // not every partition has a watermark yet
		}
		low := model.Ts(0)
		for _, w := range marks {
			if low == 0 || w < low {
				low = w
			}
		}
		if low <= last {
			continue
		}
		last = low
		check := verify.NewChecker(g, low)
		for _, r := range confirmed {
			check.Observe(r)
		}
		rep := check.Report()
		if rep.Lost != 0 || rep.OutOfOrder != 0 || rep.Expected == 0 {
			t.Fatalf("rows before the watermarks, up to the lowest (%v), while running: %+v", low, rep)
		}
		checks++
	}
	if checks < 3 {
		t.Fatalf("the watermarks advanced %d times in 4 minutes; want them to follow the checkpoint", checks)
	}
	t.Logf("%d checks against the watermarks while running; the lowest ended at %v", checks, last)
}
