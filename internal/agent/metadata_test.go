package agent

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Seed 004's downstream completeness: a consumer that trusts only the
// storage sink's root metadata file (TiCDC's checkpoint-ts) finds every
// table complete up to it, at any moment while the changefeed runs, and
// the file follows the checkpoint as it advances.
func TestAConsumerOfTheMetadataFileSeesCompleteTables(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t)
	tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	dir := t.TempDir()
	sinkURI := "file://" + dir + "?flush-interval=1s"
	created, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "demo", Source: "gen://?tables=8&keys=100&rate=2000&ddl_every=2s", Sink: sinkURI, PartitionsPerTable: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := tc.generator(created.Source)
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
	got, err := c.Changefeed(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	tc.eventually("the metadata file reaches the changefeed's checkpoint", 60*time.Second, func() bool {
		ts, err := storage.ReadCheckpoint(ctx, b)
		if err == nil && ts > last {
			last = ts
		}
		return err == nil && ts >= got.CheckpointTs
	})
	t.Logf("%d checks against the metadata file while running; it ended at %v", checks, model.Ts(last))
}
