package maintainer

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Seed 002, acceptance 4 (R5, R6), the maintainer's side: whatever
// happened to a partition since its dispatcher failed — split, moved by a
// drain or the balance scheduler, being moved, re-created for the request,
// its changefeed paused — the request gets the answer that clears it or
// keeps it, from the routing table alone (so a maintainer that has just
// been placed answers the same).
func TestRecoveryAnswersFollowTheRoutingTable(t *testing.T) {
	const cf = model.ChangefeedID("demo")
	failed := transport.RecoverRequest{ID: "p1", Epoch: 5, Err: "NOT_ENOUGH_REPLICAS"}
	active := model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n1", Epoch: 5, Status: model.PartitionActive}
	recovered := active
	recovered.Epoch = 6
	recovered.Remember(model.PartitionEvent{Kind: "recovered", From: "n1", To: "n1", Epoch: 5})
	moved := active
	moved.Node, moved.Epoch = "n2", 6
	moved.Remember(model.PartitionEvent{Kind: "moved", From: "n1", To: "n2"})
	movedAfterRecovery := recovered
	movedAfterRecovery.Node, movedAfterRecovery.Epoch = "n3", 7
	draining := active
	draining.Status, draining.Target = model.PartitionDraining, "n2"
	splitLower := active
	splitLower.Epoch = 6
	splitLower.Remember(model.PartitionEvent{Kind: "split", From: "n1", To: "n1"})

	for _, tc := range []struct {
		name  string
		route *model.RouteEntry // nil: gone
		state model.ChangefeedState
		req   transport.RecoverRequest
		want  transport.RecoverState
	}{
		{"still there under the failed epoch", &active, model.ChangefeedNormal, failed, transport.RecoverAccepted},
		{"re-created for this request", &recovered, model.ChangefeedNormal, failed, transport.RecoverRunning},
		{"moved (a drain, the balance scheduler)", &moved, model.ChangefeedNormal, failed, transport.RecoverSuperseded},
		{"re-created, then moved", &movedAfterRecovery, model.ChangefeedNormal, failed, transport.RecoverSuperseded},
		{"being moved or split", &draining, model.ChangefeedNormal, failed, transport.RecoverSuperseded},
		{"split: the lower half keeps the id", &splitLower, model.ChangefeedNormal, failed, transport.RecoverSuperseded},
		{"merged away or removed", nil, model.ChangefeedNormal, failed, transport.RecoverSuperseded},
		{"the changefeed is paused", &active, model.ChangefeedPaused, failed, transport.RecoverSuperseded},
		{"a permanent error", &active, model.ChangefeedNormal, transport.RecoverRequest{ID: "p1", Epoch: 5, Permanent: true, Run: 1}, transport.RecoverFailed},
		{"a permanent error from before a resume", &active, model.ChangefeedNormal, transport.RecoverRequest{ID: "p1", Epoch: 5, Permanent: true, Run: 0}, transport.RecoverSuperseded},
		{"a permanent error after the changefeed failed", &active, model.ChangefeedFailed, transport.RecoverRequest{ID: "p1", Epoch: 5, Permanent: true}, transport.RecoverSuperseded},
		{"an epoch this maintainer has not seen yet", &active, model.ChangefeedNormal, transport.RecoverRequest{ID: "p1", Epoch: 6}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Resumed once: run 1.
			e := &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: cf}, Status: model.ChangefeedStatus{State: tc.state, Run: 1}}
			st := &meta.State{Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{cf: {}}}
			if tc.route != nil {
				st.Partitions[cf]["p1"] = meta.RouteRecord{Route: *tc.route}
			}
			got, reason := answer(st, e, "n1", tc.req)
			if got != tc.want {
				t.Fatalf("answer %q (%s), want %q", got, reason, tc.want)
			}
		})
	}
}

// R5: every request is answered. One about an epoch the routing table
// does not have waits for the maintainer's view to catch up (no answer
// yet: the node asks again); one whose epoch never appears was never
// placed, and is answered SUPERSEDED.
func TestARequestAboutAnEpochNeverPlacedIsAnswered(t *testing.T) {
	const cf = model.ChangefeedID("demo")
	h := &Host{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e := &meta.ChangefeedEntry{Info: model.ChangefeedInfo{ID: cf}, Status: model.ChangefeedStatus{State: model.ChangefeedNormal}}
	st := &meta.State{Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{cf: {
		"p1": {Route: model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n1", Epoch: 5, Status: model.PartitionActive}},
	}}}
	rep := &heard{recover: map[string]acceptedRecovery{}, restarts: map[string]time.Time{}, unseen: map[string]time.Time{}}
	hb := &transport.Heartbeat{Recover: []transport.RecoverRequest{{ID: "p1", Epoch: 9, Err: "NOT_ENOUGH_REPLICAS"}}}
	if got := h.onRecover(st, e, rep, "n1", hb); len(got) != 0 {
		t.Fatalf("first heard: %+v; want no answer while the view may lag", got)
	}
	if got := h.onRecover(st, e, rep, "n1", hb); len(got) != 0 {
		t.Fatalf("asked again at once: %+v; want no answer yet", got)
	}
	for id := range rep.unseen {
		rep.unseen[id] = time.Now().Add(-unseenEpochWait - time.Second)
	}
	got := h.onRecover(st, e, rep, "n1", hb)
	if len(got) != 1 || got[0].State != transport.RecoverSuperseded || got[0].Epoch != 9 || len(rep.recover) != 0 {
		t.Fatalf("after the wait: %+v (accepted %v); want SUPERSEDED for epoch 9", got, rep.recover)
	}
}

// A changefeed whose dispatchers keep failing says so once its checkpoint
// has stood still for StallAfter since the last advance, naming the
// newest failure and when they began; failures while it still advances
// say nothing, and an advance clears it.
func TestAStallIsNamedOnlyWhenTheCheckpointStandsStill(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	s := stall{advanced: t0}
	if r := s.reason(t0.Add(time.Hour)); r != "" {
		t.Fatalf("no failure heard, yet %q", r)
	}
	s.heard(model.Incident{Time: t0.Add(time.Second), Kind: "recovered", Partition: "p1", Node: "n1", Err: "disk full"})
	if r := s.reason(t0.Add(StallAfter - time.Millisecond)); r != "" {
		t.Fatalf("before StallAfter: %q", r)
	}
	s.heard(model.Incident{Time: t0.Add(5 * time.Second), Kind: "restart", Node: "n2", Reason: "recover_timeout", Err: "no space left on device"})
	r := s.reason(t0.Add(StallAfter))
	for _, want := range []string{"not advancing", "since 2026-11-27T12:00:01Z", "restarted on n2 (recover_timeout)", "no space left on device"} {
		if !strings.Contains(r, want) {
			t.Fatalf("reason %q lacks %q", r, want)
		}
	}
	s.advance(t0.Add(StallAfter + time.Second))
	if r := s.reason(t0.Add(time.Hour)); r != "" {
		t.Fatalf("after an advance: %q", r)
	}
}
