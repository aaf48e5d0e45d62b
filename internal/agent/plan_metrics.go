package agent

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/exec"
)

// planMetrics count the cluster's plans by state, and the running ones
// that stalled (no step changed for the executor's stall time), for the
// "stalled plan" alert. Only the coordinator exports them: every agent
// sees the same plans, and a sum() over agents would count each plan
// once per agent.
type planMetrics struct {
	leading atomic.Bool
	byState *prometheus.GaugeVec
	stalled prometheus.Gauge
	// seen caches each plan's state by the revision it was read at:
	// records are decoded when they change, not on every pass.
	seen map[string]planSeen
}

type planSeen struct {
	rev     int64
	state   exec.State
	stalled bool
}

// planBrief is the part of a plan record the metrics read.
type planBrief struct {
	State     exec.State `json:"state"`
	StalledAt *time.Time `json:"stalled_at,omitempty"`
}

var planStates = []exec.State{exec.Running, exec.Paused, exec.Done, exec.Failed, exec.Cancelled}

func newPlanMetrics(reg *prometheus.Registry) *planMetrics {
	pm := &planMetrics{
		byState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "cdcctl", Name: "plans",
			Help: "Plans (drain, move, split, rebalance) kept by the cluster, by state; exported by the coordinator only.",
		}, []string{"state"}),
		stalled: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cdcctl", Name: "plans_stalled",
			Help: "Running plans whose steps have not moved for the stall time (a 'stalled' event was sent); exported by the coordinator only.",
		}),
		seen: map[string]planSeen{},
	}
	reg.MustRegister(pm.byState, pm.stalled)
	return pm
}

// update sets the gauges from the state's plans; called from the one
// goroutine that follows the view.
func (pm *planMetrics) update(st *meta.State) {
	if !pm.leading.Load() {
		pm.byState.Reset()
		pm.stalled.Set(0)
		return
	}
	counts := map[exec.State]int{}
	stalled := 0
	for id, raw := range st.Plans {
		s, ok := pm.seen[id]
		if !ok || s.rev != raw.Revision {
			var b planBrief
			if json.Unmarshal(raw.Value, &b) != nil {
				continue
			}
			s = planSeen{rev: raw.Revision, state: b.State, stalled: b.StalledAt != nil}
			pm.seen[id] = s
		}
		counts[s.state]++
		if s.stalled && !s.state.Terminal() {
			stalled++
		}
	}
	for id := range pm.seen {
		if _, ok := st.Plans[id]; !ok {
			delete(pm.seen, id)
		}
	}
	for _, s := range planStates {
		pm.byState.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	pm.stalled.Set(float64(stalled))
}
