package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A changefeed paused while its slot is dropped outside cdcctl cannot go
// on without losing the changes the slot held: its resume is refused at
// once, saying why and what to do, and the changefeed is failed with
// that reason, its checkpoint where the pause left it. (Before, the
// resume was answered and the reader failed the changefeed a moment
// later.) Asked again, the same answer; nothing moves meanwhile.
func TestAResumeOfAChangefeedWhoseSlotWasDroppedIsRefusedAndFailsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	if _, err := srv.Psql(ctx, "shop", `CREATE TABLE a (id int8 PRIMARY KEY, n int4);
INSERT INTO a SELECT g, 0 FROM generate_series(1, 500) g;`); err != nil {
		t.Fatal(err)
	}
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("gone", srv.DSN("shop")+"&tables=public.a", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitSnapshot("gone")
	tc.WaitCheckpoint("gone", model.TsFromTimeMicros(time.Now()))
	tc.SetState("gone", model.ChangefeedPaused)
	// The stopping reader may hold the slot a moment after the pause.
	tc.Eventually("the slot dropped outside cdcctl", 30*time.Second, func() bool {
		_, err := srv.Psql(ctx, "shop", `SELECT pg_drop_replication_slot('cdcctl_gone')`)
		return err == nil
	})
	if _, err := srv.Psql(ctx, "shop", `UPDATE a SET n = n + 1 WHERE id <= 100`); err != nil {
		t.Fatal(err)
	}
	paused := tc.Changefeed("gone").Status.CheckpointTs
	resume := func() error {
		return tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
			return c.SetChangefeedState(ctx, term, "gone", model.ChangefeedNormal, "test")
		})
	}
	for try := 1; try <= 2; try++ {
		err := resume()
		if !errors.Is(err, coordinator.ErrUnresumable) || !strings.Contains(err.Error(), "changefeed gone cannot resume, and is failed: replication slot cdcctl_gone does not exist: it was dropped outside cdcctl") ||
			!strings.Contains(err.Error(), "remove the changefeed and create it again") {
			t.Fatalf("resume %d of a changefeed whose slot was dropped: %v", try, err)
		}
		st := tc.Changefeed("gone").Status
		last := st.Incidents[len(st.Incidents)-1]
		if st.State != model.ChangefeedFailed || !strings.Contains(st.Error, "dropped outside cdcctl") || st.CheckpointTs != paused ||
			last.Kind != "failed" || !strings.Contains(last.Reason, "(a resume by test refused)") {
			t.Fatalf("after resume %d: %+v", try, st)
		}
	}
	time.Sleep(time.Second)
	if st := tc.Changefeed("gone").Status; st.State != model.ChangefeedFailed || st.CheckpointTs != paused {
		t.Fatalf("the failed changefeed moved: %+v", st)
	}
}
