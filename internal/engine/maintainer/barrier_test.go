package maintainer_test

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A table's DDL barrier opens on the maintainer's next pass, not on the
// next pass that places partitions: a settled placement is trusted for
// ten seconds (placeRecheck), and barriers opened only then held a table
// at each DDL for up to that long (a TRUNCATE under a PostgreSQL
// changefeed held its table 5 to 11 s). With a DDL every second, the
// barrier of a changefeed whose placement has long settled opens again
// and again within a few seconds, and the checkpoint follows.
func TestADDLBarrierOpensWhilePlacementIsSettled(t *testing.T) {
	t.Parallel()
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	created := tc.CreateChangefeed("ddl", "gen://?tables=1&keys=20&rate=100&ddl_every=1s", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitCheckpoint("ddl", created.StartTs+model.TsFromMillis(2000))
	barrier := func() model.Ts { return tc.State().Barriers["ddl"]["t0001"].Barrier.DDLTs }
	first := barrier()
	if first == 0 {
		t.Fatalf("no barrier opened for t0001 in %+v", tc.State().Barriers["ddl"])
	}
	// Four seconds, well inside one placeRecheck: before, a barrier opened
	// at most once in it.
	seen := map[model.Ts]bool{first: true}
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		seen[barrier()] = true
	}
	if len(seen) < 3 {
		t.Fatalf("the barrier of t0001 opened at %d DDLs in 4 s with a DDL every second; want at least 3 (first at %s)", len(seen), first)
	}
	t.Logf("the barrier opened at %d DDLs in 4 s", len(seen))
}
