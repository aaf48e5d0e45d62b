package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Seed 000 end to end: drain a capture under load; its maintainers and
// then its dispatchers leave; it ends Stopping with the record cleared;
// the sink holds everything once.
func TestDrainUnderLoadIsExactlyOnce(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t)
	leader := tc.startCaptures(3)
	c := tc.client()
	ctx := context.Background()
	dir := t.TempDir()
	sinkOf := func(name string) string { return "file://" + dir + "/" + name + "?flush-interval=100ms" }
	for _, name := range []string{"one", "two", "three"} {
		if _, err := c.CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: name, Source: "gen://?tables=4&keys=100&rate=500&ddl_every=1s", Sink: sinkOf(name), PartitionsPerTable: 2}); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := c.Changefeed(ctx, "one")
	tc.waitCheckpoint(c, "one", model.Ts(first.StartTs)+model.TsFromMillis(1000))

	// The seed's error table.
	for _, tt := range []struct {
		target string
		code   api.Code
	}{
		{"capture-9", api.CodeNotFound},
		{string(leader.Node), api.CodeBadRequest},
	} {
		if _, err := c.Drain(ctx, tt.target, api.DrainRequest{}); !api.IsCode(err, tt.code) {
			t.Fatalf("drain %s: %v, want %s", tt.target, err, tt.code)
		}
	}
	// A plan sent with the drain is checked as a submitted plan is.
	for _, p := range []*plan.Plan{
		{Version: 1, Kind: plan.KindDrain, Target: "capture-2", BatchSize: 1},                                                                            // no fingerprint
		{Version: 1, Kind: plan.KindMove, Target: "capture-2", BatchSize: 1, Fingerprint: plan.Fingerprint{Objects: map[string]model.Revision{"x": 1}}},  // another kind
		{Version: 1, Kind: plan.KindDrain, Target: "capture-3", BatchSize: 1, Fingerprint: plan.Fingerprint{Objects: map[string]model.Revision{"x": 1}}}, // another capture
	} {
		if _, err := c.Drain(ctx, "capture-2", api.DrainRequest{Plan: p}); !api.IsCode(err, api.CodeBadRequest) {
			t.Fatalf("a drain of capture-2 with a %s plan of %s (%d objects): %v, want bad request", p.Kind, p.Target, len(p.Fingerprint.Objects), err)
		}
	}

	target := tc.followerOf(leader.Node)
	res, err := c.Drain(ctx, string(target), api.DrainRequest{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch == 0 || res.Target != string(target) {
		t.Fatalf("drain response %+v", res)
	}
	// Seed 000's table: a drain while another is in progress is 409, and
	// says so. The third capture is neither the coordinator nor the
	// target, so nothing else refuses it.
	third := model.NodeID("")
	for id := range tc.nodes {
		if id != leader.Node && id != target {
			third = id
		}
	}
	if _, err := c.Drain(ctx, string(third), api.DrainRequest{}); !api.IsCode(err, api.CodeConflict) || !strings.Contains(err.Error(), "in progress") {
		t.Fatalf("a second drain, of %s: %v, want 409 conflict: another drain in progress", third, err)
	}
	// The plan's events as server-sent events, from an agent that is not
	// the coordinator, until the plan is over.
	events := tc.planEvents(tc.nodes[target].addr, res.PlanID, 60*time.Second, "")
	if len(events) < 3 || events[0].Type != exec.EventSubmitted || events[len(events)-1].Type != exec.EventDone {
		t.Fatalf("plan events: %+v", events)
	}
	// The stream's ids are 1, 2, 3, ... and each event's seq is its id.
	for i, ev := range events {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d of the stream has seq %d: %+v", i+1, ev.Seq, events)
		}
	}
	// A client that reconnects with Last-Event-ID gets ids after it, and
	// the plan as it stands, to its end.
	again := tc.planEvents(tc.nodes[leader.Node].addr, res.PlanID, 10*time.Second, "2")
	if len(again) == 0 || again[len(again)-1].Type != exec.EventDone {
		t.Fatalf("after a reconnect: %+v", again)
	}
	for i, ev := range again {
		if ev.Seq != uint64(3+i) {
			t.Fatalf("after Last-Event-ID 2, event %d has seq %d", i+1, ev.Seq)
		}
	}
	// An id no stream sends (the uint64 maximum wrapped to 0) is refused.
	req, _ := http.NewRequest(http.MethodGet, "http://"+tc.nodes[leader.Node].addr+"/api/v2/plans/"+res.PlanID+"/events", nil)
	req.Header.Set("Last-Event-ID", "18446744073709551615")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Last-Event-ID") {
			t.Fatalf("Last-Event-ID at the uint64 maximum: %s %s", resp.Status, body)
		}
	}
	steps := 0
	for _, ev := range events {
		if ev.Type == exec.EventStep && ev.State == exec.StepDone {
			steps++
		}
	}
	if steps == 0 {
		t.Fatalf("no step done among %d events", len(events))
	}
	tc.eventually("the drain completes", 60*time.Second, func() bool {
		st, err := c.DrainStatus(ctx, string(target))
		return err == nil && !st.IsDraining && st.Liveness == "Stopping" && st.RemainingMaintainerCount == 0 && len(st.RemainingDispatcherCount) == 0
	})
	if tc.state().Drain != nil {
		t.Fatal("the drain record is still in etcd")
	}
	// Seed 000's metrics: the drain is over and its duration observed.
	tc.eventually("the drain metrics show the finished drain", 15*time.Second, func() bool {
		body := tc.get(tc.nodes[leader.Node].addr, "/metrics")
		return strings.Contains(body, `cdcctl_coordinator_drain_capture_status{capture_id="`+string(target)+`"} 0`) &&
			strings.Contains(body, `cdcctl_coordinator_drain_capture_duration_seconds_count{capture_id="`+string(target)+`"} 1`)
	})
	for _, name := range []string{"one", "two", "three"} {
		rep := tc.pauseAndVerify(c, name, sinkOf(name), verifyStorage)
		if !rep.OK || rep.Duplicates != 0 {
			t.Fatalf("%s after the drain: %+v", name, rep)
		}
	}
}

// planEvents reads GET /api/v2/plans/{id}/events (server-sent events)
// until the server ends the stream, sending Last-Event-ID if lastID is
// given, and checks that each event's SSE id is its seq.
func (tc *testCluster) planEvents(addr, id string, timeout time.Duration, lastID string) []exec.Event {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v2/plans/"+id+"/events", nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tc.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		tc.t.Fatalf("events: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	var out []exec.Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sseID := ""
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			sseID = v
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev exec.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			tc.t.Fatalf("event %q: %v", data, err)
		}
		if sseID != strconv.FormatUint(ev.Seq, 10) {
			tc.t.Fatalf("SSE id %q for an event of seq %d", sseID, ev.Seq)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		tc.t.Fatalf("the event stream broke after %d events: %v", len(out), err)
	}
	return out
}
