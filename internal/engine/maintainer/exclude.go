package maintainer

// This file keeps a capture that cannot start a changefeed's partitions
// (it cannot open the sink, say) out of that changefeed's placements for a
// while, with a back-off, instead of handing partitions to it and taking
// them back for ever (a test counted 231 give-backs in 42 s).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// Exclusion back-off: a capture's first exclusion from a changefeed lasts
// excludeFirst, each one after it within excludeForget twice the last, up
// to excludeMax.
const (
	excludeFirst  = 30 * time.Second
	excludeMax    = 10 * time.Minute
	excludeForget = time.Hour
)

// exclusion is a capture kept out of one changefeed's placements.
type exclusion struct {
	until time.Time
	n     int // exclusions in a row
	why   string
}

// exclude keeps node out of cf's placements, for longer each time it is
// excluded again; its other partitions failing meanwhile are the same
// exclusion. It returns until when, and whether the exclusion is new.
func (h *Host) exclude(cf model.ChangefeedID, node model.NodeID, why string, now time.Time) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.excluded == nil {
		h.excluded = map[model.ChangefeedID]map[model.NodeID]*exclusion{}
	}
	per := h.excluded[cf]
	if per == nil {
		per = map[model.NodeID]*exclusion{}
		h.excluded[cf] = per
	}
	x := per[node]
	if x != nil && now.Before(x.until) {
		return x.until, false
	}
	if x == nil || now.Sub(x.until) > excludeForget {
		x = &exclusion{}
		per[node] = x
	}
	d := min(excludeFirst<<min(x.n, 10), excludeMax)
	x.n++
	x.until, x.why = now.Add(d), why
	return x.until, true
}

// isExcluded says node is kept out of cf's placements now.
func (h *Host) isExcluded(cf model.ChangefeedID, node model.NodeID, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	x := h.excluded[cf][node]
	return x != nil && now.Before(x.until)
}

// excludedNodes lists the captures kept out of cf's placements now, for
// logs.
func (h *Host) excludedNodes(cf model.ChangefeedID, now time.Time) []model.NodeID {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []model.NodeID
	for n, x := range h.excluded[cf] {
		if now.Before(x.until) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// destinations are the captures cf's partitions may be placed on: the
// schedulable ones not excluded from it; all the schedulable ones if
// every one is excluded (a sink down everywhere: better to keep trying
// than to place nothing).
func (h *Host) destinations(st *meta.State, cf model.ChangefeedID, now time.Time) *plan.Destinations {
	all := st.SchedulableNodeIDs()
	var ok []model.NodeID
	for _, n := range all {
		if !h.isExcluded(cf, n, now) {
			ok = append(ok, n)
		}
	}
	if len(ok) == 0 {
		ok = all
	}
	return plan.NewDestinations(ok)
}

// giveBack takes a partition from a node that failed to start it
// MaxStartFailures times, and keeps that node out of the changefeed's
// placements for a while. The partition goes to the node a move brought
// it from, if that one can take it, or to the least loaded other one; it
// starts from its checkpoint (a move's hand-over position, if it was just
// moved: the failing node wrote nothing). With nowhere else to go, it
// stays and its node keeps trying.
func (h *Host) giveBack(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence, r meta.RouteRecord, dest *plan.Destinations) error {
	now := time.Now()
	cf, bad := e.Info.ID, r.Route.Node
	why := fmt.Sprintf("%s could not start it %d times (%s)", bad, h.startFailures(cf, r.Route), h.startError(cf, r.Route.ID))
	until, fresh := h.exclude(cf, bad, why, now)
	start := model.Ts(0)
	to := model.NodeID("")
	if n := len(r.Route.History); n > 0 && r.Route.History[n-1].Kind == "moved" && r.Route.History[n-1].To == bad {
		start = r.Route.Start // where the move handed it over
		if from := r.Route.History[n-1].From; st.IsSchedulable(from) && !h.isExcluded(cf, from, now) {
			to = from
		}
	}
	if to == "" {
		if next, ok := dest.Next(); ok && next != bad {
			to = next
		}
	}
	if fresh {
		h.recordExclusion(ctx, mf, e, r.Route.ID, bad, until, why, now)
	}
	if to == "" {
		return nil // nowhere else to go; its node keeps trying
	}
	h.log.Warn("maintainer: partition given back; its capture is excluded from the changefeed for a while", "changefeed", cf, "partition", r.Route.ID,
		"from", bad, "to", to, "excluded_until", until.UTC().Format(time.TimeOnly), "why", why)
	dest.Count(to)
	return h.store.ReturnPartition(ctx, mf, r, to, start, why, now.UTC())
}

// recordExclusion shows the exclusion in the changefeed's incidents
// (`changefeed get`); the exclusion holds whether or not that lands.
func (h *Host) recordExclusion(ctx context.Context, mf meta.MaintainerFence, e *meta.ChangefeedEntry, pid string, node model.NodeID, until time.Time, why string, now time.Time) {
	in := model.Incident{Time: now.UTC(), Kind: "excluded", Partition: pid, Node: node,
		Reason: fmt.Sprintf("kept out of this changefeed's placements until %s (%s)", until.UTC().Format(time.TimeOnly), until.Sub(now).Round(time.Second)), Err: why}
	if err := h.store.RecordIncidents(ctx, mf, e, []model.Incident{in}, ""); err != nil {
		h.log.Info("maintainer: could not record an exclusion in the changefeed's status", "changefeed", e.Info.ID, "node", node, "err", err)
	}
}
