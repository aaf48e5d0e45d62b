package plan

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A rollout restarts each capture in turn, the coordinator's last: per
// capture its drain's steps (Draining first, Stopping last), then the
// restart, then the wait for work; the coordinator's begins by handing
// the role over.
func TestARolloutRestartsEachCaptureInTurnTheCoordinatorLast(t *testing.T) {
	s := snapshot(3, map[string]string{"a": "capture-1", "b": "capture-2", "c": "capture-3"}, 3)
	p, err := Rollout(s, nil, 1, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.RolloutCaptures(); !slices.Equal(got, []model.NodeID{"capture-2", "capture-3", "capture-1"}) {
		t.Fatalf("order %v; want capture-2, capture-3, then the coordinator capture-1", got)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var seq []string
	for _, b := range p.Batches {
		for _, st := range b.Steps {
			switch st.Kind {
			case StepSetLiveness:
				seq = append(seq, string(st.To)+" "+st.Liveness)
			case StepResign, StepRestart, StepAwaitWork:
				seq = append(seq, string(st.To)+" "+string(st.Kind))
			case StepMoveMaintainer, StepMovePartitions:
				if st.From == "" || st.To == st.From {
					t.Fatalf("a move of the rollout names no capture to leave: %+v", st)
				}
			}
		}
	}
	want := []string{
		"capture-2 Draining", "capture-2 Stopping", "capture-2 restart-capture", "capture-2 await-work",
		"capture-3 Draining", "capture-3 Stopping", "capture-3 restart-capture", "capture-3 await-work",
		"capture-1 resign-coordinator", "capture-1 Draining", "capture-1 Stopping", "capture-1 restart-capture", "capture-1 await-work",
	}
	if !slices.Equal(seq, want) {
		t.Fatalf("steps\n%s\nwant\n%s", strings.Join(seq, "\n"), strings.Join(want, "\n"))
	}
	if p.Steps(StepMoveMaintainer) != 3 || p.PartitionMoves() != 9 {
		t.Fatalf("%d maintainer moves and %d partition moves; want each capture's 1 and 3", p.Steps(StepMoveMaintainer), p.PartitionMoves())
	}

	// Named captures, in the order given, the coordinator still last.
	p, err = Rollout(s, []model.NodeID{"capture-1", "capture-3"}, 1, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.RolloutCaptures(); !slices.Equal(got, []model.NodeID{"capture-3", "capture-1"}) {
		t.Fatalf("order %v", got)
	}

	var out bytes.Buffer
	if err := Render(&out, s, p); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"Plan: rollout restart of 2 captures, one at a time", "coordinator (hands it over first)", "restart capture-3 (it rejoins Alive)", "capture-1 hands the coordinator role over"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the rendered plan lacks %q:\n%s", line, out.String())
		}
	}
}

// What a rollout refuses, each with its reason.
func TestARolloutRefusesWhatItCannotRestart(t *testing.T) {
	s := snapshot(3, map[string]string{"a": "capture-1"}, 3)
	draining := snapshot(3, nil, 0)
	draining.Nodes[2].Liveness = model.LivenessDraining
	busy := snapshot(3, nil, 0)
	busy.Draining = "capture-3"
	for _, c := range []struct {
		name     string
		snap     *model.Snapshot
		captures []model.NodeID
		reason   RefusalReason
		says     string
	}{
		{"one capture", snapshot(1, nil, 0), nil, RefuseInvalid, "the cluster has one capture"},
		{"unknown", s, []model.NodeID{"capture-9"}, RefuseNotFound, "capture-9: capture not found"},
		{"twice", s, []model.NodeID{"capture-2", "capture-2"}, RefuseInvalid, "named twice"},
		{"not alive", draining, []model.NodeID{"capture-3"}, RefuseInvalid, "it is Draining"},
		{"a drain runs", busy, nil, RefuseInProgress, "a drain of capture-3 is in progress"},
	} {
		_, err := Rollout(c.snap, c.captures, 1, DefaultCosts)
		var r *Refusal
		if !errors.As(err, &r) || r.Reason != c.reason || !strings.Contains(r.Message, c.says) || r.Hint == "" {
			t.Errorf("%s: %v; want a %s refusal saying %q, with a hint", c.name, err, c.reason, c.says)
		}
	}
	// Two captures: while either restarts, the other holds everything.
	two := snapshot(2, map[string]string{"a": "capture-1"}, 2)
	p, err := Rollout(two, nil, 1, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	fs := PreCheck(CheckInput{Snapshot: two}, p)
	if len(fs) != 1 || fs[0].Check != CheckLastCapture || fs[0].Severity != Warning {
		t.Fatalf("pre-checks of a rollout of two captures: %+v", fs)
	}
}
