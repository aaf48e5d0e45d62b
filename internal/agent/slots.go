package agent

import (
	"context"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// slotsEvery is how often the node reads how much WAL the replication
// slots of the changefeeds it maintains retain.
const slotsEvery = 30 * time.Second

// watchSlots keeps cdcctl_source_retained_bytes{changefeed} for the
// database changefeeds this node maintains (their readers run here), so
// that a slot holding back more and more WAL (a changefeed paused, failing
// or far behind) raises an alert before the database's disk fills.
func (n *Node) watchSlots(ctx context.Context, view *cluster.View) {
	shown := map[model.ChangefeedID]bool{}
	t := time.NewTicker(slotsEvery)
	defer t.Stop()
	for {
		st := view.State()
		now := map[model.ChangefeedID]bool{}
		for id, e := range st.Changefeeds {
			if e.Maintainer.Node != n.ID() || !sources.HoldsUpstream(e.Info.SourceURI) {
				continue
			}
			ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ss, err := sources.Inspect(ictx, e.Info.SourceURI)
			cancel()
			if err != nil || ss == nil {
				continue // unreachable: the last value stays, the changefeed's error says why
			}
			n.metrics.slotRetained.WithLabelValues(string(id)).Set(float64(ss.RetainedBytes))
			now[id] = true
		}
		for id := range shown {
			if _, still := st.Changefeeds[id]; !still || st.Changefeeds[id].Maintainer.Node != n.ID() {
				n.metrics.slotRetained.DeleteLabelValues(string(id))
				delete(shown, id)
			}
		}
		for id := range now {
			shown[id] = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
