package changefeeds

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A resume whose check of the upstream finds the resume point gone fails
// the changefeed only if it is still as checked: where the point stored
// moved meanwhile (a reader still stopping after the pause stores a later
// one, and confirms it to the slot), the point checked says nothing of
// the one the reader will resume from, so the resume goes on and the
// reader checks that one itself. The test moves the stored point just
// before the coordinator's write of the failure: the write is refused as
// stale, the coordinator reads the changefeed again, finds it moved, and
// resumes it; the reader then finds the slot gone and fails the
// changefeed with its own words, not as a refused resume.
func TestAResumeWhoseCheckedPointMovedMeanwhileGoesOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.StartDB(t, "shop")
	if _, err := srv.Psql(ctx, "shop", `CREATE TABLE a (id int8 PRIMARY KEY, n int4);
INSERT INTO a SELECT g, 0 FROM generate_series(1, 200) g;`); err != nil {
		t.Fatal(err)
	}
	keys := meta.NewKeys(enginetest.ClusterID)
	statusKey := keys.ChangefeedStatus("moved")
	var tc *enginetest.Cluster
	failed := func(v []byte) bool { return strings.Contains(string(v), `"state":"failed"`) }
	hook := enginetest.NewWriteHook(statusKey, failed, func(ctx context.Context, n int) {
		if n != 1 {
			return
		}
		// The stopping reader's later point: the position's ts one on,
		// written as a reader's report would be.
		got, err := tc.Client.Get(ctx, statusKey)
		if err != nil || len(got.Kvs) != 1 {
			t.Errorf("read %s: %v", statusKey, err)
			return
		}
		var st model.ChangefeedStatus
		var pos map[string]json.RawMessage
		if err := json.Unmarshal(got.Kvs[0].Value, &st); err != nil || json.Unmarshal(st.SourcePosition, &pos) != nil {
			t.Errorf("decode the status %s: %v", got.Kvs[0].Value, err)
			return
		}
		// The ts alone, as an integer (a float would round it).
		ts, err := strconv.ParseUint(string(pos["ts"]), 10, 64)
		if err != nil {
			t.Errorf("the position's ts %s: %v", pos["ts"], err)
			return
		}
		pos["ts"] = json.RawMessage(strconv.FormatUint(ts+1, 10))
		st.SourcePosition, _ = json.Marshal(pos)
		b, _ := json.Marshal(st)
		if _, err := tc.Client.Put(ctx, statusKey, string(b)); err != nil {
			t.Errorf("write %s: %v", statusKey, err)
		}
	})
	tc = enginetest.New(t, enginetest.Options{Interceptor: hook.Interceptor})
	tc.StartCaptures(2)
	tc.CreateChangefeed("moved", srv.DSN("shop")+"&tables=public.a", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.WaitSnapshot("moved")
	tc.WaitCheckpoint("moved", model.TsFromTimeMicros(time.Now()))
	tc.SetState("moved", model.ChangefeedPaused)
	tc.Eventually("the slot dropped outside cdcctl", 30*time.Second, func() bool {
		_, err := srv.Psql(ctx, "shop", `SELECT pg_drop_replication_slot('cdcctl_moved')`)
		return err == nil
	})
	hook.Arm()
	err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
		return c.SetChangefeedState(ctx, term, "moved", model.ChangefeedNormal, "test")
	})
	if hook.Met() == 0 {
		t.Fatal("the coordinator did not try to fail the changefeed: its check found nothing to refuse")
	}
	if err != nil {
		t.Fatalf("a resume whose point moved during its check was refused: %v", err)
	}
	// The reader, resumed, finds the slot gone itself.
	tc.Eventually("the reader to fail the changefeed", 60*time.Second, func() bool {
		return tc.Changefeed("moved").Status.State == model.ChangefeedFailed
	})
	st := tc.Changefeed("moved").Status
	for _, inc := range st.Incidents {
		if strings.Contains(inc.Reason, "resume by test refused") {
			t.Fatalf("the changefeed was failed as a refused resume, though its point moved: %+v", inc)
		}
	}
	if !strings.Contains(st.Error, "dropped outside cdcctl") {
		t.Fatalf("the reader's failure: %q", st.Error)
	}
}
