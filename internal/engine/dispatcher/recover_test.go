package dispatcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/sink/blackhole"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// recoverRig is a manager on node n1 with a changefeed whose partition
// p1 runs there under epoch 5, its maintainer on n2 (epoch 1); no etcd:
// the view is fixed, and the test changes it.
type recoverRig struct {
	t    *testing.T
	m    *Manager
	view *cluster.View
	st   *meta.State
	hub  *transport.Hub
	got  []transport.RecoverRequest // what the maintainer received
	cnt  *countMetrics
}

type countMetrics struct {
	recovered int
	pending   int
	answers   map[transport.RecoverState]int
	restarts  map[string]int
}

func (c *countMetrics) Recovered()                        { c.recovered++ }
func (c *countMetrics) Pending(n int)                     { c.pending = n }
func (c *countMetrics) Answered(s transport.RecoverState) { c.answers[s]++ }
func (c *countMetrics) Restarted(reason string)           { c.restarts[reason]++ }

const cf = model.ChangefeedID("demo")

func newRecoverRig(t *testing.T) *recoverRig {
	st := &meta.State{
		Changefeeds: map[model.ChangefeedID]*meta.ChangefeedEntry{cf: {
			Info:               model.ChangefeedInfo{ID: cf, SinkURI: "blackhole://"},
			Status:             model.ChangefeedStatus{State: model.ChangefeedNormal},
			Maintainer:         model.MaintainerPlacement{Node: "n2", Epoch: 1},
			MaintainerRevision: 10,
		}},
		Partitions: map[model.ChangefeedID]map[string]meta.RouteRecord{cf: {
			"p1": {Route: model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n1", Epoch: 5, Status: model.PartitionActive, Span: model.Span{Table: "t0001"}}},
		}},
	}
	hub := transport.NewHub()
	view := cluster.Fixed(st)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cnt := &countMetrics{answers: map[transport.RecoverState]int{}, restarts: map[string]int{}}
	m := NewManager(ManagerConfig{Self: "n1", View: view, Transport: hub.Join("n1"), Log: quiet, Metrics: cnt})
	rig := &recoverRig{t: t, m: m, view: view, st: st, hub: hub, cnt: cnt}
	for _, n := range []model.NodeID{"n2", "n3"} {
		hub.Join(n).Handle(transport.TopicHeartbeat, func(_ context.Context, msg transport.Message) {
			var hb transport.Heartbeat
			if msg.Decode(&hb) == nil {
				rig.got = append(rig.got, hb.Recover...)
			}
		})
	}
	return rig
}

// fail makes p1's dispatcher of epoch fail at once, as a sink failure
// would.
func (rig *recoverRig) fail(epoch uint64) { rig.failAfter("p1", epoch, 0) }

// failAfter makes a partition's dispatcher of epoch fail after it ran for
// ran.
func (rig *recoverRig) failAfter(pid string, epoch uint64, ran time.Duration) {
	r := &managed{route: meta.RouteRecord{Route: model.RouteEntry{ID: pid, Changefeed: cf, Node: "n1", Epoch: epoch}}, d: rig.dispatcher(pid, epoch, 0), began: time.Now().Add(-ran)}
	rig.m.mu.Lock()
	rig.m.failedRun(r, errors.New("kafka: NOT_ENOUGH_REPLICAS"))
	rig.m.mu.Unlock()
}

// dispatcher is a partition's dispatcher of epoch with checkpoint from.
func (rig *recoverRig) dispatcher(pid string, epoch uint64, from model.Ts) *Dispatcher {
	g, err := gen.New(gen.Config{Tables: 1, Keys: 10, Rate: 10, StartMillis: time.Now().UnixMilli()})
	if err != nil {
		rig.t.Fatal(err)
	}
	d, err := New(Config{ID: pid + ".x", Epoch: epoch, Span: model.Span{Table: "t0001"}, Start: from, Source: g, Sink: blackhole.New(), Now: g.Resolved})
	if err != nil {
		rig.t.Fatal(err)
	}
	return d
}

// beat sends one round of heartbeats and returns the requests the
// maintainer got in it.
func (rig *recoverRig) beat() []transport.RecoverRequest {
	rig.got = nil
	rig.m.heartbeat(context.Background(), rig.view.State())
	return rig.got
}

// answer delivers a recovery answer as if from node from, maintainer
// epoch me.
func (rig *recoverRig) answer(from model.NodeID, me, epoch uint64, state transport.RecoverState) {
	msg, err := transport.NewMessage(from, "n1", transport.TopicRecoverAnswer, transport.RecoverAnswer{Changefeed: cf, MaintainerEpoch: me,
		Answers: []transport.RecoverReply{{ID: "p1", Epoch: epoch, State: state}}})
	if err != nil {
		rig.t.Fatal(err)
	}
	rig.m.onRecoverAnswer(context.Background(), msg)
}

func (rig *recoverRig) pending() *recovery {
	rig.m.mu.Lock()
	defer rig.m.mu.Unlock()
	return rig.m.recovering[key(cf, "p1")]
}

// moveMaintainer places the changefeed's maintainer on node, epoch.
func (rig *recoverRig) moveMaintainer(node model.NodeID, epoch uint64) {
	st := rig.st.Clone()
	e := *st.Changefeeds[cf]
	e.Maintainer = model.MaintainerPlacement{Node: node, Epoch: epoch}
	st.Changefeeds[cf] = &e
	rig.st = st
	rig.view.Set(st)
}

// Seed 002, acceptance 1 (R2, R3, R4): repeated transient errors of one
// dispatcher in one epoch make one recovery request, re-sent with every
// heartbeat until it has a final answer; a failure under the next epoch
// replaces it rather than adding another.
func TestRepeatedErrorsInOneEpochMakeOneRequest(t *testing.T) {
	rig := newRecoverRig(t)
	for range 5 {
		rig.fail(5)
	}
	for i := range 3 {
		got := rig.beat()
		if len(got) != 1 || got[0].ID != "p1" || got[0].Epoch != 5 {
			t.Fatalf("heartbeat %d carried %+v, want the one request of p1 epoch 5", i+1, got)
		}
	}
	rig.answer("n2", 1, 5, transport.RecoverAccepted)
	if got := rig.beat(); len(got) != 1 {
		t.Fatalf("an ACCEPTED request is not final and is re-sent; the heartbeat carried %+v", got)
	}
	if rig.cnt.pending != 1 {
		t.Fatalf("pending gauge %d, want 1", rig.cnt.pending)
	}
	// The partition is re-created under epoch 6 and fails again at once:
	// still one recovery, now about epoch 6 (after a back-off).
	rig.m.mu.Lock()
	rig.m.started(model.RouteEntry{ID: "p1", Changefeed: cf, Epoch: 6})
	rig.m.mu.Unlock()
	rig.fail(6)
	rig.fail(6)
	rec := rig.pending()
	if rec == nil || rec.epoch != 6 || rec.recreated != 0 || len(rig.m.recovering) != 1 {
		t.Fatalf("after a failure under the next epoch: %+v (%d pending)", rec, len(rig.m.recovering))
	}
	if rec.sendAfter.Before(time.Now()) {
		t.Fatalf("a second failure in a row is asked about at once; want a back-off")
	}
}

// Seed 002, acceptance 2 and 3 (R7, R8): after the maintainer moves, the
// request goes on to the new one under its epoch, and answers from the
// old one (or about another identity) change nothing.
func TestARecoveryFollowsTheMaintainerAndIgnoresStaleAnswers(t *testing.T) {
	rig := newRecoverRig(t)
	rig.fail(5)
	rig.beat()
	rig.answer("n2", 1, 5, transport.RecoverAccepted)
	rig.moveMaintainer("n3", 2)
	got := rig.beat()
	if len(got) != 1 || rig.pending().maintainerEpoch != 2 {
		t.Fatalf("after the maintainer moved: sent %+v, identity %+v", got, rig.pending())
	}
	// Stale: the old maintainer, a forged epoch, another dispatcher epoch.
	rig.answer("n2", 1, 5, transport.RecoverSuperseded)
	rig.answer("n3", 1, 5, transport.RecoverFailed)
	rig.answer("n2", 2, 5, transport.RecoverFailed)
	rig.answer("n3", 2, 4, transport.RecoverSuperseded)
	if rec := rig.pending(); rec == nil || rec.state != "" {
		t.Fatalf("stale answers changed the recovery: %+v", rec)
	}
	if len(rig.cnt.restarts) != 0 {
		t.Fatalf("a stale FAILED restarted the changefeed: %v", rig.cnt.restarts)
	}
	// The current maintainer's answers count.
	rig.answer("n3", 2, 5, transport.RecoverRunning)
	if rec := rig.pending(); rec == nil || rec.state != transport.RecoverRunning {
		t.Fatalf("the current maintainer's RUNNING: %+v", rec)
	}
	rig.answer("n3", 2, 5, transport.RecoverSuperseded)
	if rig.pending() != nil || len(rig.beat()) != 0 {
		t.Fatalf("SUPERSEDED is final: the recovery should be gone and nothing re-sent")
	}
	if rig.cnt.answers[transport.RecoverRunning] != 1 || rig.cnt.answers[transport.RecoverSuperseded] != 1 || rig.cnt.answers[transport.RecoverAccepted] != 1 {
		t.Fatalf("answers counted: %v", rig.cnt.answers)
	}
}

// Seed 002, acceptance 5 (R10), the manager's side: a FAILED answer to a
// transient error, or a recovery that does not finish within the recover
// timeout, restarts the changefeed on this node, counted by reason.
func TestARecoveryThatFailsRestartsTheChangefeed(t *testing.T) {
	rig := newRecoverRig(t)
	rig.fail(5)
	rig.beat()
	rig.answer("n2", 1, 5, transport.RecoverFailed)
	rig.m.mu.Lock()
	why, ok := rig.m.restartFeeds[cf]
	rig.m.mu.Unlock()
	if !ok || why.Reason != "recover_failed" || rig.pending() != nil {
		t.Fatalf("after FAILED: restart %+v %v, pending %+v", why, ok, rig.pending())
	}
	rig.m.restartFeed(cf, why)
	if rig.cnt.restarts["recover_failed"] != 1 {
		t.Fatalf("restarts counted: %v", rig.cnt.restarts)
	}

	rig.fail(5)
	rig.m.mu.Lock()
	rig.m.recovering[key(cf, "p1")].since = time.Now().Add(-2 * time.Minute)
	restart := rig.m.checkRecoveries(rig.view.State(), recoverTimeout(rig.view.State()))
	rig.m.mu.Unlock()
	if restart[cf].Reason != "recover_timeout" || rig.pending() != nil {
		t.Fatalf("a recovery older than the recover timeout: restart %+v, pending %+v", restart, rig.pending())
	}
}

// A permanent error is not recovered: FAILED leaves the partition
// waiting (not restarted here) until the changefeed fails.
func TestAPermanentErrorWaitsForTheOperator(t *testing.T) {
	rig := newRecoverRig(t)
	rig.fail(5)
	rig.m.mu.Lock()
	rig.m.recovering[key(cf, "p1")].req.Permanent = true
	rig.m.mu.Unlock()
	rig.beat()
	rig.answer("n2", 1, 5, transport.RecoverFailed)
	rig.m.mu.Lock()
	_, restarts := rig.m.restartFeeds[cf]
	waits := rig.m.waitsForRecovery(model.RouteEntry{ID: "p1", Changefeed: cf, Epoch: 5})
	rig.m.mu.Unlock()
	if restarts || !waits || len(rig.beat()) != 0 {
		t.Fatalf("a permanent error: restart %v, waits %v", restarts, waits)
	}
}

// The back-off spaces a partition's attempts, counted from the start of
// the run that failed: a dispatcher that fails at once waits it out, one
// that ran (retried) longer than its back-off asks again at once. And a
// partition that recovers releases the others of its changefeed from
// their back-off: the sink takes writes again (without this, a partition
// that failed near a fault's end sat out its back-off after the broker
// was back, and the changefeed caught up later than with a restart).
func TestTheBackOffCountsFromTheFailedRunAndEndsWhenAPartitionRecovers(t *testing.T) {
	rig := newRecoverRig(t)
	recreate := func(pid string, epoch uint64) {
		rig.m.mu.Lock()
		rig.m.started(model.RouteEntry{ID: pid, Changefeed: cf, Epoch: epoch})
		rig.m.mu.Unlock()
	}
	waits := func(pid string) bool {
		rig.m.mu.Lock()
		defer rig.m.mu.Unlock()
		rec := rig.m.recovering[key(cf, pid)]
		return rec != nil && rec.sendAfter.After(time.Now())
	}
	// Failing at once, twice in a row: the second waits.
	rig.failAfter("p1", 5, 0)
	recreate("p1", 6)
	rig.failAfter("p1", 6, 0)
	if !waits("p1") {
		t.Fatal("a dispatcher failing at once, a second time: want a back-off")
	}
	// Failing after a run longer than its back-off (1 s for a third
	// failure): it has waited, and asks at once.
	recreate("p1", 7)
	rig.failAfter("p1", 7, 3*time.Second)
	if waits("p1") {
		t.Fatal("a dispatcher that ran 3 s before it failed waits again; want it to ask at once")
	}

	// p2 fails at once twice and waits; p1 is re-created and runs
	// healthy (its checkpoint passes where it failed): p2 asks at once.
	st := rig.st.Clone()
	st.Partitions[cf]["p2"] = meta.RouteRecord{Route: model.RouteEntry{ID: "p2", Changefeed: cf, Node: "n1", Epoch: 3, Status: model.PartitionActive, Span: model.Span{Table: "t0001"}}}
	rig.st = st
	rig.view.Set(st)
	rig.failAfter("p2", 3, 0)
	recreate("p2", 4)
	rig.failAfter("p2", 4, 0)
	if !waits("p2") {
		t.Fatal("p2 failing at once a second time: want a back-off")
	}
	recreate("p1", 8)
	rig.m.mu.Lock()
	rig.m.running[key(cf, "p1")] = &managed{route: meta.RouteRecord{Route: model.RouteEntry{ID: "p1", Changefeed: cf, Node: "n1", Epoch: 8}}, d: rig.dispatcher("p1", 8, 1)}
	rig.m.checkRecoveries(rig.view.State(), recoverTimeout(rig.view.State()))
	_, p1 := rig.m.recovering[key(cf, "p1")]
	rig.m.mu.Unlock()
	if p1 || rig.cnt.recovered != 1 {
		t.Fatalf("p1 runs healthy again: still pending %v, recovered %d", p1, rig.cnt.recovered)
	}
	if waits("p2") {
		t.Fatal("p1 recovered, but p2 still waits out its back-off")
	}
	if got := rig.beat(); len(got) != 1 || got[0].ID != "p2" || got[0].Epoch != 4 {
		t.Fatalf("the next heartbeat carried %+v, want p2's request", got)
	}
}
