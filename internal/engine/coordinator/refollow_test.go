package coordinator_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A change of a changefeed's tables the coordinator computed from a
// round's view is not made once the changefeed has moved on since (an
// operator paused and resumed it, or updated it): the round's view may
// be tens of seconds old, and the change would undo the operator's. One
// computed from the changefeed as it is pauses it, and a step that fails
// (a gen:// changefeed's tables cannot change) resumes it at once with
// an incident that says what was left undone.
func TestAChangeOfTablesFromAStaleViewIsNotMade(t *testing.T) {
	t.Parallel()
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(1)
	tc.CreateChangefeed("cf", "gen://?tables=2&keys=10&rate=50", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.Warm("cf", 0)
	read := tc.Changefeed("cf")
	tc.SetState("cf", model.ChangefeedPaused)
	tc.SetState("cf", model.ChangefeedNormal)
	refollow := func(read *meta.ChangefeedEntry) error {
		return tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
			return c.Refollow(ctx, term, read, "its table rules", []string{"t0001"})
		})
	}
	if err := refollow(read); !errors.Is(err, coordinator.ErrMovedOn) {
		t.Fatalf("a change from before a resume: %v, want %v", err, coordinator.ErrMovedOn)
	}
	e := tc.Changefeed("cf")
	if e.Status.State != model.ChangefeedNormal || e.Status.Refollow != nil || slices.ContainsFunc(e.Status.Incidents, func(in model.Incident) bool {
		return in.Reason == "by its table rules"
	}) {
		t.Fatalf("the changefeed after a stale change: %s, %+v, incidents %+v", e.Status.State, e.Status.Refollow, e.Status.Incidents)
	}

	if err := refollow(e); err == nil || errors.Is(err, coordinator.ErrMovedOn) {
		t.Fatalf("a change of a gen:// changefeed's tables: %v, want the update's refusal", err)
	}
	e = tc.Changefeed("cf")
	paused := slices.ContainsFunc(e.Status.Incidents, func(in model.Incident) bool { return in.Kind == "paused" && in.Reason == "by its table rules" })
	resumed := slices.ContainsFunc(e.Status.Incidents, func(in model.Incident) bool {
		return in.Kind == "resumed" && strings.HasPrefix(in.Reason, "by its table rules (its tables' change left undone: ")
	})
	if e.Status.State != model.ChangefeedNormal || e.Status.Refollow != nil || !paused || !resumed {
		t.Fatalf("the changefeed after a change whose first step failed: %s, %+v, incidents %+v", e.Status.State, e.Status.Refollow, e.Status.Incidents)
	}
}

// An operator who updates or resumes a changefeed while the coordinator
// changes its tables takes the change over: the coordinator, back from
// waiting for its dispatchers to stop, makes no step of its own change
// and does not resume it. Before, its step undid the operator's update
// and its resume resumed a changefeed the operator kept paused. Here the
// operator resumed it and paused it again (the record is cleared); the
// coordinator's change then ends without a step, the changefeed stays
// paused.
func TestAChangeOfTablesAnOperatorTookOverIsLeftToTheOperator(t *testing.T) {
	t.Parallel()
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(1)
	tc.CreateChangefeed("cf", "gen://?tables=2&keys=10&rate=50", "file://"+t.TempDir()+"?flush-interval=100ms", 1)
	tc.Warm("cf", 0)
	r := model.Refollow{By: "its table rules", Steps: [][]string{{"t0001"}}, Since: time.Now().UTC()}
	tc.LeaveRefollow("cf", r)
	r = *tc.Changefeed("cf").Status.Refollow // as stored: with the changefeed's run
	tc.SetState("cf", model.ChangefeedNormal)
	tc.SetState("cf", model.ChangefeedPaused)
	err := tc.Coordinate(func(ctx context.Context, c *coordinator.Coordinator, term election.Term) error {
		return c.FinishRefollow(ctx, term, "cf", r)
	})
	if !errors.Is(err, coordinator.ErrMovedOn) {
		t.Fatalf("the coordinator's change after an operator took it over: %v, want %v", err, coordinator.ErrMovedOn)
	}
	e := tc.Changefeed("cf")
	if e.Status.State != model.ChangefeedPaused || e.Status.Refollow != nil || slices.ContainsFunc(e.Status.Incidents, func(in model.Incident) bool {
		return in.Kind == "resumed" && strings.HasPrefix(in.Reason, "by "+r.By)
	}) {
		t.Fatalf("the changefeed after the coordinator's change was taken over: %s, %+v, incidents %+v", e.Status.State, e.Status.Refollow, e.Status.Incidents)
	}
}
