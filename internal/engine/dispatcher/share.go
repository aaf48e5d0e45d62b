package dispatcher

import (
	"unsafe"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// share is this node's part of the routing table, as reconcile reads it:
// the partitions it should run (of changefeeds running normally) and those
// being moved away from it, by key. A changefeed's part is built again
// only when its routing table or state changed: reconcile runs on every
// change of the cluster's state (a progress write, a heartbeat of
// liveness), and walking 100,000 partitions each time to find a third of
// them was a tenth of every capture's CPU; during a drain some routing
// table changes on nearly every change, and rebuilding the whole share
// for it was a twentieth.
type share struct {
	sig          map[model.ChangefeedID]shareSig
	keys         map[model.ChangefeedID][]string // what each changefeed put in want and moving
	registered   int64                           // the revision of this node's registration it read
	want, moving map[string]meta.RouteRecord
	// built counts the changes: a reconcile that saw change n, and finds
	// it again with nothing else to do, has nothing to change (settled).
	built uint64
	// dirty are the changefeeds whose part changed, and whole says the
	// share was built anew, since the last take.
	dirty map[model.ChangefeedID]bool
	whole bool
}

// take returns the changefeeds whose part changed, and whether the whole
// share was built anew, since the last take.
func (s *share) take() (dirty map[model.ChangefeedID]bool, whole bool) {
	dirty, whole = s.dirty, s.whole
	s.dirty, s.whole = nil, false
	return dirty, whole
}

func (s *share) changed(cf model.ChangefeedID) {
	if s.dirty == nil {
		s.dirty = map[model.ChangefeedID]bool{}
	}
	s.dirty[cf] = true
}

// shareSig is what a changefeed's part of a share was built from.
type shareSig struct {
	routes unsafe.Pointer // meta.State.RoutesID; keeps the table alive
	state  model.ChangefeedState
}

// of returns the share of node self in st. The maps are the caller's to
// read, not to change, until the next call.
func (s *share) of(st *meta.State, self model.NodeID) (want, moving map[string]meta.RouteRecord) {
	registered := st.Nodes[self].Revision
	if s.want == nil || registered != s.registered {
		// Which placements are this process's depends on its registration
		// (meta.State.PlacedOnIncarnation): all of it again.
		s.sig, s.keys = map[model.ChangefeedID]shareSig{}, map[model.ChangefeedID][]string{}
		s.want, s.moving = map[string]meta.RouteRecord{}, map[string]meta.RouteRecord{}
		s.registered = registered
		s.built++
		s.whole = true
	}
	changed := false
	for cf, e := range st.Changefeeds {
		sig := shareSig{routes: st.RoutesID(cf), state: e.Status.State}
		if old, ok := s.sig[cf]; ok && old == sig {
			continue
		}
		s.drop(cf)
		s.sig[cf] = sig
		s.add(st, cf, e, self, registered)
		s.changed(cf)
		changed = true
	}
	for cf := range s.sig {
		if _, ok := st.Changefeeds[cf]; !ok {
			s.drop(cf)
			delete(s.sig, cf)
			s.changed(cf)
			changed = true
		}
	}
	if changed {
		s.built++
	}
	return s.want, s.moving
}

// drop takes changefeed cf's part out of the share.
func (s *share) drop(cf model.ChangefeedID) {
	for _, k := range s.keys[cf] {
		delete(s.want, k)
		delete(s.moving, k)
	}
	delete(s.keys, cf)
}

// add puts changefeed cf's part of st in the share.
func (s *share) add(st *meta.State, cf model.ChangefeedID, e *meta.ChangefeedEntry, self model.NodeID, registered int64) {
	var keys []string
	for pid, r := range st.Partitions[cf] {
		if r.Route.Node != self {
			continue
		}
		switch {
		case r.Route.Status == model.PartitionDraining:
			k := key(cf, pid)
			s.moving[k] = r
			keys = append(keys, k)
		case e.Status.State == model.ChangefeedNormal && (registered == 0 || st.PlacedOnIncarnation(r)):
			// A placement on an earlier process under this node's id
			// is not run: its maintainer places it again
			// (meta.State.PlacedOnIncarnation). A node not registered
			// in st (a unit test's) goes by its id alone.
			k := key(cf, pid)
			s.want[k] = r
			keys = append(keys, k)
		}
	}
	if keys != nil {
		s.keys[cf] = keys
	}
}

// settled says whether a reconcile would change nothing: the share is the
// one the last full reconcile worked from (build seen), nothing is being
// moved away, none is left to start, and no dispatcher ended, no start
// failed, no recovery or restart waits since. A settled reconcile is skipped: at 100,000
// partitions, checking each of a node's 33,000 dispatchers against its
// share on every state change was the largest cost left in reconcile.
// m.mu is held.
func (m *Manager) settledLocked(seen uint64) bool {
	return seen == m.share.built && len(m.share.moving) == 0 && !m.ended.Load() && !m.more &&
		len(m.failed) == 0 && len(m.recovering) == 0 && len(m.restartFeeds) == 0
}
