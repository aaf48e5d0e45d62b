package agent

import (
	"context"
	"errors"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// refusalError maps the planner's refusals to the API's codes (seed 000's
// error table: 400, 404, 409).
func refusalError(err error) error {
	if e, ok := api.PlanError(err); ok {
		return e
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
	budget, err := req.Budget.Budget()
	if err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "give the budget as durations, --resume-below under --max-lag ('cdcctl drain --help')", "%v", err)
	}
	p, rec, err := coord.SubmitDrain(ctx, term, model.NodeID(id), req.Batch, req.Plan, coordinator.Submission{By: req.SubmittedBy, Paused: req.Paused, Budget: budget})
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
