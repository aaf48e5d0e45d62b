package dispatcher

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A dispatcher says once that its copy is durable, at the ack that makes
// it so; the node reports its last copy of a changefeed at once, not at
// the next heartbeat (up to half a second later: a third of a 1,000,000-row
// MySQL snapshot's time until its end showed), and does not for a
// changefeed still copying here.
func TestTheLastCopyOnANodeIsReportedAtOnce(t *testing.T) {
	calls := 0
	d := &Dispatcher{cfg: Config{OnCopied: func() { calls++ }}, acked: make(chan struct{}, 1)}
	copying := &inflightBatch{end: 10, copied: model.CopyProgress{To: "k5"}}
	done := &inflightBatch{end: 20, copied: model.CopyProgress{Done: true}}
	after := &inflightBatch{end: 30, copied: model.CopyProgress{Done: true}}
	d.inflight = []*inflightBatch{copying, done, after}
	d.ack(copying, nil)
	if calls != 0 {
		t.Fatalf("OnCopied called %d times before the copy is durable", calls)
	}
	d.ack(done, nil)
	d.ack(after, nil)
	if calls != 1 {
		t.Fatalf("OnCopied called %d times, want once, at the ack that made the copy durable", calls)
	}

	running := func(pid string, cf model.ChangefeedID, copied bool) *managed {
		return &managed{route: meta.RouteRecord{Route: model.RouteEntry{ID: pid, Changefeed: cf}},
			d: &Dispatcher{copied: model.CopyProgress{Done: copied}}}
	}
	m := &Manager{wake: make(chan struct{}, 1), copiedSince: map[model.ChangefeedID]bool{}, running: map[string]*managed{
		key("a", "p1"): running("p1", "a", true), key("a", "p2"): running("p2", "a", false),
		key("b", "q1"): running("q1", "b", true),
	}}
	if m.copiesPending() != nil || m.copiesEndedHere() {
		t.Fatal("an early heartbeat with no copy ended")
	}
	m.copied("a") // p1: p2 still copies here
	if len(m.wake) != 1 {
		t.Fatal("a copy's end did not wake the manager's loop")
	}
	if m.copiesEndedHere() {
		t.Fatal("an early heartbeat while p2 still copies changefeed a here")
	}
	m.copied("b") // q1, the only partition of b here
	if !m.copiesEndedHere() {
		t.Fatal("no early heartbeat for changefeed b's last copy here")
	}
	if m.copiesEndedHere() {
		t.Fatal("a second early heartbeat for the same end")
	}

	// Within earlyBeatGap of a heartbeat it waits, and is not forgotten.
	m.lastBeat = time.Now()
	m.copied("b")
	if m.copiesEndedHere() {
		t.Fatal("an early heartbeat right after a heartbeat")
	}
	select {
	case <-m.copiesPending():
	case <-time.After(10 * time.Second):
		t.Fatal("the pending end never fired")
	}
	if !m.copiesEndedHere() {
		t.Fatal("the end that waited out the gap was forgotten")
	}
}
