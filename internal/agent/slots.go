package agent

import (
	"cmp"
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
// or far behind) raises an alert before the database's disk fills; and
// cdcctl_source_retention_headroom_seconds{changefeed} for upstreams
// that purge their log by age whatever readers need (MySQL), so that a
// changefeed falling behind raises an alert before its position is gone
// (0 or below once it is gone).
func (n *Node) watchSlots(ctx context.Context, view *cluster.View) {
	var shown map[model.ChangefeedID]bool // the changefeeds of the last round
	t := time.NewTicker(cmp.Or(n.retentionEvery, slotsEvery))
	defer t.Stop()
	for {
		st := view.State()
		mine := map[model.ChangefeedID]bool{}
		for id, e := range st.Changefeeds {
			if e.Maintainer.Node != n.ID() || !sources.HoldsUpstream(e.Info.SourceURI) {
				continue
			}
			mine[id] = true
			ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
			// The log's retention alone: Inspect's warnings read the
			// catalog, for nothing here (every 30 s, for each changefeed).
			ss, err := sources.Retention(ictx, e.Info.SourceURI, e.Status.SourcePosition)
			cancel()
			// Unreachable, or not all said: the last value stays, and the
			// changefeed's error says why.
			if err == nil && ss != nil {
				if ss.Slot != "" {
					// A slot's WAL: held for the changefeed, filling the
					// database's disk (the alert's threshold).
					n.metrics.slotRetained.WithLabelValues(string(id)).Set(float64(ss.RetainedBytes))
				}
				if ss.RetentionSeconds > 0 || ss.Purged {
					lag := time.Since(e.Status.CheckpointTs.Time())
					headroom := float64(ss.RetentionSeconds) - lag.Seconds()
					if ss.Purged {
						// Gone already, whatever the checkpoint's age says
						// (the resume point can be older: an XA
						// transaction prepared and waiting holds it).
						headroom = min(headroom, 0)
					}
					n.metrics.headroom.WithLabelValues(string(id)).Set(headroom)
				} else {
					n.metrics.headroom.DeleteLabelValues(string(id))
				}
			}
		}
		for id := range shown {
			if !mine[id] { // removed, or maintained elsewhere now
				n.metrics.slotRetained.DeleteLabelValues(string(id))
				n.metrics.headroom.DeleteLabelValues(string(id))
			}
		}
		shown = mine
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
