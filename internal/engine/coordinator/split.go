package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// The split of a partition at a key (cdcctl partition split): validated
// at submission, begun with one write to its routing entry, checked until
// the entry is Active again, cut where the operator asked. The
// maintainer's side is maintainer/split.go.

// validateSplitStep: the operator's text is validated, and the encoded
// key the routing table gets must be its encoding.
func validateSplitStep(snap *model.Snapshot, s plan.Step) error {
	text := s.Key
	if s.KeyText != "" {
		text = s.KeyText
	}
	pp, err := plan.ValidateSplit(snap, s.Partition, text)
	if err != nil {
		return err
	}
	if enc, _ := model.EncodeKey(pp.Route.Span.Key, text); enc != s.Key {
		return &plan.Refusal{Reason: plan.RefuseInvalid, Message: fmt.Sprintf("the split step of %s cuts at %q, which is not the encoding of %q", s.Partition, s.Key, text), Hint: "compute the plan with cdcctl"}
	}
	return nil
}

// requestSplit asks the partition's maintainer to cut it at the step's
// key (the routing entry goes Draining with the key).
func (a *partitionActuator) requestSplit(ctx context.Context, s plan.Step, r meta.RouteRecord, now time.Time) error {
	return a.c.store.RequestSplit(ctx, a.term.Fence, r, s.Key, now)
}

// checkSplit judges a split step from its routing entry.
func checkSplit(s plan.Step, state exec.StepState, route model.RouteEntry) exec.Outcome {
	if state == exec.StepPending {
		if route.Status == model.PartitionDraining && !begun(route, s) {
			return exec.Outcome{Waiting: "busy: another operation is in progress"}
		}
		if splitDone(route, s) {
			// Begun and finished, but the step was not saved as running:
			// the coordinator that requested it failed over (the
			// maintainer splits in milliseconds). Begun again, the
			// request was refused (the key is the partition's end now)
			// and the plan failed although the split was made.
			return exec.Outcome{Done: true, Note: splitNote(route)}
		}
		return exec.Outcome{}
	}
	if route.Status != model.PartitionActive {
		return exec.Outcome{}
	}
	if route.Span.End != s.Key {
		return exec.Outcome{Failed: fmt.Sprintf("the partition is Active again but was not cut at %q", model.DecodeKey(route.Span.Key, s.Key))}
	}
	return exec.Outcome{Done: true, Note: splitNote(route)}
}

// splitDone says a pending split step's partition is cut at its key
// already: Active, ending at the key, its last event a split. A key the
// partition ended at before is refused when the plan is submitted.
func splitDone(route model.RouteEntry, s plan.Step) bool {
	n := len(route.History)
	return route.Status == model.PartitionActive && route.Span.End == s.Key && n > 0 && route.History[n-1].Kind == "split"
}

func splitNote(route model.RouteEntry) string {
	if n := len(route.History); n > 0 && route.History[n-1].Kind == "split" {
		return "split " + route.History[n-1].Detail
	}
	return "split"
}
