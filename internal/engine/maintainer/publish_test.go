package maintainer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka"
	"github.com/cdcctl/cdcctl/internal/engine/sink/kafka/kafkatest"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// The maintainer publishes each checkpoint it persists to its
// changefeed's sink (seed 004): a consumer that trusts only what is
// published finds every table complete up to it.

// Seed 004's downstream completeness: a consumer that trusts only the
// storage sink's root metadata file (TiCDC's checkpoint-ts) finds every
// table complete up to it, at any moment while the changefeed runs, and
// the file follows the checkpoint as it advances.
func TestAConsumerOfTheMetadataFileSeesCompleteTables(t *testing.T) {
	t.Parallel()
	c := enginetest.New(t, enginetest.Options{})
	c.StartCaptures(3)
	ctx := context.Background()
	dir := t.TempDir()
	sinkURI := "file://" + dir + "?flush-interval=1s"
	created := c.CreateChangefeed("demo", "gen://?tables=8&keys=100&rate=2000&ddl_every=2s", sinkURI, 2)
	g := c.Generator(created.SourceURI)
	b, err := bucket.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var last uint64
	checks := 0
	// Count checks, not seconds: on a loaded machine the checkpoint may
	// advance slowly, and a slow machine is not a failure of the file.
	for deadline := time.Now().Add(90 * time.Second); checks < 4; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the metadata file advanced %d times in 90 s; want it to follow the checkpoint", checks)
		}
		ts, err := storage.ReadCheckpoint(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if ts == 0 || ts == last {
			continue
		}
		if ts < last {
			t.Fatalf("the metadata file went back from %v to %v", model.Ts(last), model.Ts(ts))
		}
		last = ts
		rep, err := verify.Storage(ctx, g, sinkURI, model.Ts(ts))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Lost != 0 || rep.OutOfOrder != 0 || rep.Misplaced != 0 || rep.Expected == 0 {
			t.Fatalf("up to the metadata file's checkpoint %v, while running: %+v", model.Ts(ts), rep)
		}
		checks++
	}
	// The file follows the checkpoint: it reaches the one read now.
	cp := c.Changefeed("demo").Status.CheckpointTs
	c.Eventually("the metadata file reaches the changefeed's checkpoint", 60*time.Second, func() bool {
		ts, err := storage.ReadCheckpoint(ctx, b)
		if err == nil && ts > last {
			last = ts
		}
		return err == nil && model.Ts(ts) >= cp
	})
	t.Logf("%d checks against the metadata file while running; it ended at %v", checks, model.Ts(last))
}

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
	c := enginetest.New(t, enginetest.Options{})
	c.StartCaptures(3)
	ctx := context.Background()
	sinkURI := fmt.Sprintf("kafka://%s/demo?partition-num=4", kc.Addrs())
	// 500 changes a second: what is proven is that the watermarks follow
	// the checkpoint, not throughput; at 1,500 a consumer starved of CPU
	// (under -race, beside other tests) fell ever further behind the
	// topic, each scan longer than the last (one ran 29 minutes and held
	// 9 GB of rows).
	created := c.CreateChangefeed("demo", "gen://?tables=6&keys=100&rate=500&ddl_every=2s", sinkURI, 2)
	g := c.Generator(created.SourceURI)
	cfg, err := kafka.ParseURI(sinkURI)
	if err != nil {
		t.Fatal(err)
	}
	checks := 0
	var last model.Ts
	// Read as a consumer follows the topic: each message once (reading
	// it all again each second grew with the topic until a slow machine
	// could not keep up).
	next := map[int32]int64{}
	// Per partition: the rows after its last watermark, and that
	// watermark; the rows before each partition's last one.
	pending := map[int32][]verify.Row{}
	var confirmed []verify.Row
	marks := map[int32]model.Ts{}
	// Three advances, each checked; the deadline is for a machine that is
	// slow, not a measure of the pace.
	// The bound is generous: what is proven is what the watermarks
	// promise, not how fast they come (a starved CI machine has taken
	// 90 s for two advances).
	// The scans stop at the deadline too, not only between them.
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	for ; checks < 3 && ctx.Err() == nil; time.Sleep(time.Second) {
		err := kafka.ScanMessagesFrom(ctx, cfg, next, func(p int32, offset int64, value []byte) error {
			kind, r, ts, err := codec.DecodeCanalMessage(value)
			if err != nil {
				return fmt.Errorf("partition %d offset %d: %w", p, offset, err)
			}
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
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
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
