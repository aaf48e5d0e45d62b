package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// A cancelled step's line says cancelled, and so does its count: not
// "[1/1 done]" for a plan whose one step was cancelled.
func TestACancelledStepsLineCountsItCancelled(t *testing.T) {
	st := plan.Step{Kind: plan.StepMovePartition, Partition: "p7", From: "capture-1", To: "capture-2"}
	var b strings.Builder
	printEvent(&b, "", exec.Event{Time: time.Unix(1000, 0), Type: exec.EventStep, Step: &st, State: exec.StepCancelled,
		Progress: &exec.Progress{Cancelled: 1, Total: 1}})
	if got := b.String(); !strings.HasSuffix(got, ": cancelled [0/1 done, 1 cancelled, 0 running]\n") {
		t.Fatalf("the line: %q", got)
	}
}

// abandoning is a cluster where every step begun takes effect, until it
// abandons the plan (its drained capture died, say).
type abandoning struct {
	begun map[string]bool
	why   string
}

func (a *abandoning) Check(_ context.Context, _ *plan.Plan, s plan.Step, _ exec.StepState, _ time.Time) (exec.Outcome, error) {
	return exec.Outcome{Done: a.begun[plan.StepText(s)]}, nil
}
func (a *abandoning) Begin(_ context.Context, _ *plan.Plan, s plan.Step) error {
	a.begun[plan.StepText(s)] = true
	return nil
}
func (a *abandoning) Replan(_ context.Context, _ *plan.Plan, s plan.Step) (plan.Step, bool, error) {
	return s, false, nil
}
func (a *abandoning) Abandoned(context.Context, *exec.Record) (string, error) { return a.why, nil }
func (a *abandoning) Cancel(context.Context, *plan.Plan) error                { return nil }

// servePlan answers the plan API with rec as an agent reads it back from
// etcd, and returns the server's address.
func servePlan(t *testing.T, rec *exec.Record) string {
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return serveStoredPlan(t, b)
}

// serveStoredPlan answers the plan API with the record etcd holds as
// stored, read as an agent reads it.
func serveStoredPlan(t *testing.T, stored []byte) string {
	rec, err := exec.Decode(stored)
	if err != nil {
		t.Fatal(err)
	}
	return serveRecord(t, rec)
}

// serveRecord answers the plan API with rec.
func serveRecord(t *testing.T, rec *exec.Record) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v2/plans":
			answer(w, api.PlanList{Version: api.SchemaVersion, Plans: []api.PlanSummary{{ID: rec.ID, Kind: rec.Plan.Kind,
				Target: string(rec.Plan.Target), State: rec.State, Steps: rec.Counts(), SubmittedAt: rec.SubmittedAt.Format(time.RFC3339)}}})
		case "/api/v2/plans/" + rec.ID:
			answer(w, api.PlanOf(rec, exec.RequestNone))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// cdcctl runs a command line against server and returns its exit code
// and output.
func cdcctl(server string, args ...string) (int, string) {
	var out, errOut strings.Builder
	code := Execute(append([]string{"--server", server}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String() + errOut.String()
}

// A plan the cluster abandoned after its first of three steps reads
// 1 done and 2 skipped wherever an operator looks, not "3/3 done": its
// steps not done were skipped, and are counted so.
func TestAnAbandonedPlansSkippedStepsAreNotCountedDone(t *testing.T) {
	mv := func(p string) plan.Batch {
		return plan.Batch{Steps: []plan.Step{{Kind: plan.StepMovePartition, Changefeed: "demo", Partition: p, Table: "orders", From: "capture-3", To: "capture-1"}}}
	}
	p := &plan.Plan{Version: 1, Kind: "move", Target: "p1", Batches: []plan.Batch{mv("p1"), mv("p2"), mv("p3")}}
	cluster := &abandoning{begun: map[string]bool{}}
	x := &exec.Executor{Act: cluster, Now: func() time.Time { return time.Unix(1000, 0) }}
	rec := exec.New("move-p1-1", p, "ops", time.Unix(1000, 0))
	for i := 0; i < 3; i++ {
		if i == 2 {
			cluster.why = "capture-3 is gone"
		}
		if _, err := x.Advance(context.Background(), rec, exec.RequestNone); err != nil {
			t.Fatal(err)
		}
	}
	if rec.State != exec.Failed {
		t.Fatalf("plan %s: %s", rec.State, rec.Message)
	}
	server := servePlan(t, rec)

	for _, tt := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"plan", "watch", rec.ID}, ExitError, []string{
			"demo/p2 (orders) capture-3 → capture-1: skipped (capture-3 is gone) [1/3 done, 1 skipped, 0 running]\n",
			"demo/p3 (orders) capture-3 → capture-1: skipped (capture-3 is gone) [1/3 done, 2 skipped, 0 running]\n",
			" failed: capture-3 is gone [1/3 done, 2 skipped, 0 running]\n"}},
		{[]string{"plan", "watch", rec.ID, "-o", "json"}, ExitError, []string{
			`"type":"failed","message":"capture-3 is gone","progress":{"done":1,"skipped":2,"running":0,"total":3}}`}},
		{[]string{"plan", "show", rec.ID}, ExitOK, []string{"; 1/3 steps done, 2 skipped, 0 running\n", " skipped  ", " (capture-3 is gone)\n"}},
		{[]string{"plan", "list"}, ExitOK, []string{" failed  1/3 "}},
	} {
		code, out := cdcctl(server, tt.args...)
		for _, want := range tt.want {
			if code != tt.code || !strings.Contains(out, want) {
				t.Errorf("cdcctl %s: exit %d (want %d), no %q in:\n%s", strings.Join(tt.args, " "), code, tt.code, want, out)
			}
		}
	}
}

// A plan cancelled before 2026-12-06 was stored with its step not done
// skipped, noted "cancelled": plan watch and plan show read it cancelled,
// as they do a plan cancelled now, not 'skipped (cancelled) [1/1 done]'.
func TestAPlanStoredCancelledBeforeReadsAsOneCancelledNow(t *testing.T) {
	stored := []byte(`{"version":1,"id":"move-p7-1","plan":{"version":1,"id":"move-p7-1","kind":"move","target":"p7",
 "batches":[{"steps":[{"kind":"move-partition","changefeed":"demo","partition":"p7","table":"orders","from":"capture-1","to":"capture-2","reason":"asked"}]}]},
 "state":"cancelled","message":"cancelled by request; steps already done stay done",
 "steps":[{"batch":0,"index":0,"state":"skipped","since":"2026-12-01T10:00:05Z","started":"2026-12-01T10:00:01Z","ended":"2026-12-01T10:00:05Z","note":"cancelled","seq":3}],
 "submitted_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T10:00:05Z","finished_at":"2026-12-01T10:00:05Z","seq":4,
 "log":[{"version":1,"seq":1,"time":"2026-12-01T10:00:00Z","plan":"move-p7-1","type":"submitted","message":"move p7: 1 batches, 1 steps","progress":{"done":0,"running":0,"total":1}},
  {"version":1,"seq":4,"time":"2026-12-01T10:00:05Z","plan":"move-p7-1","type":"cancelled","message":"cancelled by request; steps already done stay done","progress":{"done":1,"running":0,"total":1}}],
 "progress_at":"2026-12-01T10:00:05Z"}`)
	// As an agent of this version answers it, and as an older agent
	// does, the record as stored: cdcctl reads both the same.
	var asStored exec.Record
	if err := json.Unmarshal(stored, &asStored); err != nil {
		t.Fatal(err)
	}
	for _, server := range []string{serveStoredPlan(t, stored), serveRecord(t, &asStored)} {
		planReadsCancelled(t, server)
	}
}

// planReadsCancelled checks how cdcctl shows the cancelled plan
// move-p7-1 that server answers.
func planReadsCancelled(t *testing.T, server string) {
	t.Helper()
	for _, tt := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"plan", "watch", "move-p7-1"}, ExitCancelled, []string{
			"demo/p7 (orders) capture-1 → capture-2: cancelled [0/1 done, 1 cancelled, 0 running]\n",
			" cancelled: cancelled by request; steps already done stay done [0/1 done, 1 cancelled, 0 running]\n"}},
		{[]string{"plan", "watch", "move-p7-1", "-o", "json"}, ExitCancelled, []string{
			`"state":"cancelled","progress":{"done":0,"cancelled":1,"running":0,"total":1}`,
			`"type":"cancelled","message":"cancelled by request; steps already done stay done","progress":{"done":0,"cancelled":1,"running":0,"total":1}}`}},
		{[]string{"plan", "show", "move-p7-1"}, ExitOK, []string{"; 0/1 steps done, 1 cancelled, 0 running\n", " cancelled partition demo/p7"}},
	} {
		code, out := cdcctl(server, tt.args...)
		for _, want := range tt.want {
			if code != tt.code || !strings.Contains(out, want) || strings.Contains(out, "skipped") {
				t.Errorf("cdcctl %s: exit %d (want %d), no %q (or a step skipped) in:\n%s", strings.Join(tt.args, " "), code, tt.code, want, out)
			}
		}
	}
}
