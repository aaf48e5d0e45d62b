package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// refusalError maps the planner's refusals to the API's codes (seed 000's
// error table: 400, 404, 409).
func refusalError(err error) error {
	var stale *plan.StaleError
	if errors.As(err, &stale) {
		e := &api.Error{Code: api.CodeStalePlan, Message: stale.Error(),
			Hint: "compute the plan again (run the command again, or --dry-run to review it)"}
		for _, c := range stale.Changes {
			e.Changed = append(e.Changed, c.String())
		}
		return e
	}
	var busy *plan.BusyError
	if errors.As(err, &busy) {
		msg := busy.Error()
		if !busy.Since.IsZero() {
			msg += fmt.Sprintf(" (for %s)", time.Since(busy.Since).Round(100*time.Millisecond))
		}
		return &api.Error{Code: api.CodePartitionBusy, Message: msg, RetryAfterSeconds: 1,
			Hint: "retry when it is Active again ('cdcctl partition get " + busy.Partition + "')"}
	}
	var r *plan.Refusal
	if errors.As(err, &r) {
		code := api.CodeBadRequest
		switch r.Reason {
		case plan.RefuseNotFound:
			code = api.CodeNotFound
		case plan.RefuseInProgress:
			code = api.CodeConflict
		}
		return &api.Error{Code: code, Message: r.Message, Hint: r.Hint}
	}
	if errors.Is(err, meta.ErrDrainInProgress) {
		return api.Errorf(api.CodeConflict, "wait for it to finish ('cdcctl drain status')", "another drain operation is in progress")
	}
	return engineError(err, "")
}

func (b backend) Drain(ctx context.Context, id string, req api.DrainRequest) (*api.DrainCaptureResponse, error) {
	coord, term, err := b.leading()
	if err != nil {
		return nil, err
	}
	p, rec, err := coord.SubmitDrain(ctx, term, model.NodeID(id), req.Batch, req.Plan, req.SubmittedBy)
	if err != nil {
		return nil, refusalError(err)
	}
	return &api.DrainCaptureResponse{Version: api.SchemaVersion, Target: id, Epoch: rec.Epoch, PlanID: p.ID,
		CurrentMaintainerCount: rec.InitialMaintainerCount, CurrentDispatcherCount: rec.InitialDispatcherCount}, nil
}

func (b backend) DrainStatus(ctx context.Context, id string) (*api.DrainStatusResponse, error) {
	st, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := st.Nodes[model.NodeID(id)]; !ok {
		if st.Drain == nil || string(st.Drain.Target) != id {
			return nil, api.Errorf(api.CodeNotFound, "list the captures with 'cdcctl capture list'", "capture %q not found", id)
		}
	}
	maintainers, dispatchers := coordinator.DrainProgress(st, model.NodeID(id))
	out := &api.DrainStatusResponse{Version: api.SchemaVersion, Liveness: st.LivenessOf(model.NodeID(id)).String(),
		RemainingMaintainerCount: maintainers, RemainingDispatcherCount: map[string]int{}}
	if _, ok := st.Nodes[model.NodeID(id)]; !ok {
		out.Liveness = "Gone"
	}
	for cf, n := range dispatchers {
		out.RemainingDispatcherCount[string(cf)] = n
	}
	if st.Drain != nil {
		out.DrainingCaptureID = string(st.Drain.Target)
		if string(st.Drain.Target) == id {
			out.IsDraining, out.Epoch = true, st.Drain.Epoch
			t := st.Drain.StartTime
			out.StartedAt = &t
		}
	}
	return out, nil
}
