package plan

import (
	"fmt"
	"slices"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Rollout plans a rolling restart (tidb-operator's loop for TiCDC, as one
// plan): each capture in turn hands the coordinator role over if it holds
// it, is drained as Drain would drain it (batches of at most batch
// maintainers), is asked to restart, comes back Alive as a new
// incarnation, and is given work again; then the next. One capture at a
// time: never two out of service at once, and the cluster's single drain
// record is what empties each.
//
// captures are the ones to restart, in order (none: every Alive capture,
// in the snapshot's order); the coordinator goes last either way, so
// that the role moves once, to a capture already restarted.
func Rollout(s *model.Snapshot, captures []model.NodeID, batch int, costs Costs) (*Plan, error) {
	order, err := rolloutOrder(s, captures)
	if err != nil {
		return nil, err
	}
	if batch < 1 {
		batch = 1
	}
	p := &Plan{Version: 1, Kind: KindRollout, BatchSize: batch,
		Fingerprint: fingerprintAll(s)}
	for _, id := range order {
		if id == s.Coordinator {
			p.Batches = append(p.Batches, Batch{Steps: []Step{{Kind: StepResign, To: id,
				Reason: "the role moves to an Alive capture before this one drains, so the plan goes on under the next coordinator"}}})
		}
		p.Batches = append(p.Batches, drainBatches(s, id, batch)...)
		p.Batches = append(p.Batches,
			Batch{Steps: []Step{{Kind: StepRestart, To: id,
				Reason: "asked to exit gracefully; its service manager starts it again, and it rejoins Alive as a new incarnation"}}},
			Batch{Steps: []Step{{Kind: StepAwaitWork, To: id,
				Reason: "the balance scheduler gives it its share again before the next capture goes"}}})
	}
	p.PredictedMillis = predict(p.Batches, costs).Milliseconds()
	return p, nil
}

// rolloutOrder checks the captures to restart and orders them: as asked,
// the coordinator last.
func rolloutOrder(s *model.Snapshot, captures []model.NodeID) ([]model.NodeID, error) {
	if len(s.Nodes) < 2 {
		return nil, &Refusal{RefuseInvalid, "cannot restart captures one by one: the cluster has one capture, and its work would have nowhere to go meanwhile",
			"start another capture first, or restart this one with its service manager (replication pauses meanwhile)"}
	}
	if s.Draining != "" && !s.DrainEnded {
		return nil, &Refusal{RefuseInProgress, fmt.Sprintf("cannot restart captures: a drain of %s is in progress", s.Draining),
			"wait for it to finish ('cdcctl plan list'), or cancel it"}
	}
	if len(captures) == 0 {
		for _, n := range s.Nodes {
			captures = append(captures, n.Info.ID)
		}
	}
	var order []model.NodeID
	for _, id := range captures {
		n, ok := s.Node(id)
		switch {
		case !ok:
			return nil, &Refusal{RefuseNotFound, fmt.Sprintf("cannot restart %s: capture not found", id), "list the captures with 'cdcctl capture list'"}
		case slices.Contains(order, id):
			return nil, &Refusal{RefuseInvalid, fmt.Sprintf("%s is named twice", id), "name each capture once"}
		case n.Liveness != model.LivenessAlive:
			return nil, &Refusal{RefuseInvalid, fmt.Sprintf("cannot restart %s: it is %s", id, n.Liveness),
				"leave it out (--captures), or restart it with its service manager: it comes back Alive"}
		}
		order = append(order, id)
	}
	if i := slices.Index(order, s.Coordinator); i >= 0 {
		order = append(slices.Delete(order, i, i+1), s.Coordinator)
	}
	for _, id := range order {
		others := false
		for _, n := range s.Nodes {
			others = others || n.Info.ID != id && n.Liveness.IsSchedulable()
		}
		if !others {
			return nil, &Refusal{RefuseNoDestination, fmt.Sprintf("cannot restart %s: no other capture is Alive to take its work meanwhile", id), "start another capture first"}
		}
	}
	return order, nil
}

// RolloutCaptures are the captures a rollout restarts, in its order.
func (p *Plan) RolloutCaptures() []model.NodeID {
	var out []model.NodeID
	for _, b := range p.Batches {
		for _, s := range b.Steps {
			if s.Kind == StepRestart {
				out = append(out, s.To)
			}
		}
	}
	return out
}

// RestartByHook names, in Plan.RestartBy, a rollout whose captures the
// hook of the cdcctl following it restarts ('cdcctl rollout upgrade
// --exec'): the plan does not ask a capture to exit; it waits, after its
// drain, for the capture to come back as a new incarnation.
const RestartByHook = "hook"

// ByHook makes a rollout's restarts the hook's (RestartByHook).
func (p *Plan) ByHook() {
	p.RestartBy = RestartByHook
	for b := range p.Batches {
		for i, s := range p.Batches[b].Steps {
			if s.Kind == StepRestart {
				p.Batches[b].Steps[i].Reason = "restarted by the rollout's hook (a new version, say); it rejoins Alive as a new incarnation"
			}
		}
	}
}

// RolloutVerb is what a rollout does to each capture, as its commands
// name it: "restart", or "upgrade" when its hook restarts them.
func (p *Plan) RolloutVerb() string {
	if p.RestartBy == RestartByHook {
		return "upgrade"
	}
	return "restart"
}

// KindText names a plan's kind as its command does ("rollout upgrade").
func (p *Plan) KindText() string {
	if p.Kind == KindRollout {
		return "rollout " + p.RolloutVerb()
	}
	return string(p.Kind)
}
