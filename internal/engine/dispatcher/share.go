package dispatcher

import (
	"slices"
	"unsafe"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// share is this node's part of the routing table, as reconcile reads it:
// the partitions it should run (of changefeeds running normally) and those
// being moved away from it, by key. It is built again only when a
// changefeed's routing table or state changed: reconcile runs on every
// change of the cluster's state (a progress write, a heartbeat of
// liveness), and walking 100,000 partitions each time to find a third of
// them was a tenth of every capture's CPU.
type share struct {
	sig          []shareSig
	registered   int64 // the revision of this node's registration it read
	want, moving map[string]meta.RouteRecord
	// built counts the builds: a reconcile that saw build n, and finds it
	// again with nothing else to do, has nothing to change (settled).
	built uint64
}

// shareSig is what a share was built from, per changefeed.
type shareSig struct {
	cf     model.ChangefeedID
	routes unsafe.Pointer // meta.State.RoutesID; keeps the table alive
	state  model.ChangefeedState
}

// of returns the share of node self in st. The maps are the caller's to
// read, not to change.
func (s *share) of(st *meta.State, self model.NodeID) (want, moving map[string]meta.RouteRecord) {
	ids := st.ChangefeedIDs()
	sig := make([]shareSig, 0, len(ids))
	for _, cf := range ids {
		sig = append(sig, shareSig{cf: cf, routes: st.RoutesID(cf), state: st.Changefeeds[cf].Status.State})
	}
	registered := st.Nodes[self].Revision
	if s.want != nil && slices.Equal(sig, s.sig) && registered == s.registered {
		return s.want, s.moving
	}
	want, moving = map[string]meta.RouteRecord{}, map[string]meta.RouteRecord{}
	for _, cf := range ids {
		e := st.Changefeeds[cf]
		for pid, r := range st.Partitions[cf] {
			if r.Route.Node != self {
				continue
			}
			switch {
			case r.Route.Status == model.PartitionDraining:
				moving[key(cf, pid)] = r
			case e.Status.State == model.ChangefeedNormal && (registered == 0 || st.PlacedOnIncarnation(r)):
				// A placement on an earlier process under this node's id
				// is not run: its maintainer places it again
				// (meta.State.PlacedOnIncarnation). A node not registered
				// in st (a unit test's) goes by its id alone.
				want[key(cf, pid)] = r
			}
		}
	}
	s.sig, s.registered, s.want, s.moving = sig, registered, want, moving
	s.built++
	return want, moving
}

// settled says whether a reconcile would change nothing: the share is the
// one the last full reconcile worked from (build seen), nothing is being
// moved away, and no dispatcher ended, no start failed, no recovery or
// restart waits since. A settled reconcile is skipped: at 100,000
// partitions, checking each of a node's 33,000 dispatchers against its
// share on every state change was the largest cost left in reconcile.
// m.mu is held.
func (m *Manager) settledLocked(seen uint64) bool {
	return seen == m.share.built && len(m.share.moving) == 0 && !m.ended.Load() &&
		len(m.failed) == 0 && len(m.recovering) == 0 && len(m.restartFeeds) == 0
}
