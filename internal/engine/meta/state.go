package meta

import (
	"encoding/json"
	"maps"
	"sort"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/model"
)

// NodeEntry is a registered node and the mod-revision of its key.
type NodeEntry struct {
	Info     model.NodeInfo
	Revision int64
}

// LivenessEntry is a persisted liveness and the mod-revision of its key.
type LivenessEntry struct {
	Record   model.LivenessRecord
	Revision int64
}

type electionEntry struct {
	node           model.NodeID
	createRevision int64
}

// termEntry is the term key of a backend outside etcd: its leader and the
// key's mod-revision.
type termEntry struct {
	node        model.NodeID
	modRevision int64
}

// Leader is the current coordinator according to the election keys.
type Leader struct {
	Node  model.NodeID
	Fence Fence
}

// State is the cluster's control state at one etcd revision. It is built by
// Load and kept current by Apply, so a watcher has the same picture as a
// fresh read at the same revision.
type State struct {
	ClusterID string
	Revision  int64
	Nodes     map[model.NodeID]NodeEntry
	Liveness  map[model.NodeID]LivenessEntry
	elections map[string]electionEntry
	term      *termEntry // nil unless a backend outside etcd elected someone
	// TermEpoch is the highest epoch a backend outside etcd (the MySQL
	// lock) raised; 0 with the etcd backend.
	TermEpoch uint64
	termKey   string
	// Changefeeds, the routing table and progress, by changefeed. The
	// inner maps are replaced, never changed, when a state moves on.
	Changefeeds map[model.ChangefeedID]*ChangefeedEntry
	Partitions  map[model.ChangefeedID]map[string]RouteRecord
	Progress    map[model.ChangefeedID]map[string]ProgressRecord
	// progressShards are the stored records Progress merges, by shard
	// (progress.go).
	progressShards map[model.ChangefeedID]map[string]map[string]ProgressRecord
	Barriers       map[model.ChangefeedID]map[string]BarrierRecord // by table
	// Drain is the drain in progress, if any, and its revision.
	Drain         *model.DrainRecord
	DrainRevision int64
	// Plans are executed plans' records as stored (exec.Record JSON; meta
	// does not know its shape), and the operators' requests, by plan id.
	Plans        map[string]RawRecord
	PlanRequests map[string]string
	// Cleanups are the sources removed changefeeds have yet to release.
	Cleanups map[model.ChangefeedID]CleanupEntry
	// Restarts are the captures a rollout asked to restart.
	Restarts map[model.NodeID]RestartEntry

	// sorted caches SortedPartitions, per changefeed (changefeeds.go),
	// shared by a state and its clones.
	sortedMu *sync.Mutex
	sorted   map[model.ChangefeedID]sortedRoutes

	// owned are the inner maps this state copied since it was cloned:
	// no published state shares them, so they change in place (mine).
	owned map[ownedMap]bool
	// copied counts the entries those copies took (Copied).
	copied int
}

// CleanupEntry is a stored source cleanup and its revision.
type CleanupEntry struct {
	Record   model.SourceCleanup
	Revision int64
}

// RestartEntry is a stored restart request and its revision.
type RestartEntry struct {
	Request  model.RestartRequest
	Revision int64
}

// RawRecord is a stored value this package does not decode.
type RawRecord struct {
	Value    []byte
	Revision int64
}

func newState(clusterID string) *State {
	return &State{
		ClusterID: clusterID,
		Nodes:     map[model.NodeID]NodeEntry{},
		Liveness:  map[model.NodeID]LivenessEntry{},
		elections: map[string]electionEntry{},

		Changefeeds:    map[model.ChangefeedID]*ChangefeedEntry{},
		Partitions:     map[model.ChangefeedID]map[string]RouteRecord{},
		Progress:       map[model.ChangefeedID]map[string]ProgressRecord{},
		progressShards: map[model.ChangefeedID]map[string]map[string]ProgressRecord{},
		owned:          map[ownedMap]bool{},
		Barriers:       map[model.ChangefeedID]map[string]BarrierRecord{},

		Plans:        map[string]RawRecord{},
		PlanRequests: map[string]string{},
		Cleanups:     map[model.ChangefeedID]CleanupEntry{},
		Restarts:     map[model.NodeID]RestartEntry{},

		sortedMu: &sync.Mutex{},
		sorted:   map[model.ChangefeedID]sortedRoutes{},
	}
}

// Clone returns a deep copy that a caller may keep while the original moves on.
func (s *State) Clone() *State {
	// Entries and inner maps are copied on write (applyChangefeed), so a
	// shallow copy of the outer maps is enough here. maps.Clone copies a
	// map's table whole: a view clones its state once per watch response,
	// and re-inserting each key was a twentieth of a loaded capture's CPU
	// during a 20,000-partition drain.
	c := &State{
		ClusterID: s.ClusterID,
		Revision:  s.Revision,
		Nodes:     cloned(s.Nodes),
		Liveness:  cloned(s.Liveness),
		elections: cloned(s.elections),

		Changefeeds:    cloned(s.Changefeeds),
		Partitions:     cloned(s.Partitions),
		Progress:       cloned(s.Progress),
		progressShards: cloned(s.progressShards),
		owned:          map[ownedMap]bool{},
		Barriers:       cloned(s.Barriers),

		Plans:        cloned(s.Plans),
		PlanRequests: cloned(s.PlanRequests),
		Cleanups:     cloned(s.Cleanups),
		Restarts:     cloned(s.Restarts),
	}
	c.term, c.termKey, c.TermEpoch = s.term, s.termKey, s.TermEpoch
	c.Drain, c.DrainRevision = s.Drain, s.DrainRevision
	if s.sortedMu != nil {
		// One cache for a state and its clones: an entry is checked
		// against the map at use, and a published routing table never
		// changes, so whichever state sorted a table sorted it for all.
		// A clone's own copy was refilled only where it was asked before
		// the next clone: a view clones as soon as it publishes, so a
		// drain's progress sorted every changed table again per state.
		c.sortedMu, c.sorted = s.sortedMu, s.sorted
	} else {
		c.sortedMu, c.sorted = &sync.Mutex{}, map[model.ChangefeedID]sortedRoutes{}
	}
	return c
}

// cloned is maps.Clone that never returns nil: a State's maps are always
// there to write to.
func cloned[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return maps.Clone(m)
}

// Leader returns the node whose election key has the lowest create revision.
func (s *State) Leader() (Leader, bool) {
	var best Leader
	found := false
	if s.term != nil && len(s.elections) == 0 {
		return Leader{Node: s.term.node, Fence: Fence{Key: s.termKey, ModRevision: s.term.modRevision}}, true
	}
	for key, e := range s.elections {
		if !found || e.createRevision < best.Fence.CreateRevision {
			best = Leader{Node: e.node, Fence: Fence{Key: key, CreateRevision: e.createRevision}}
			found = true
		}
	}
	return best, found
}

// IsCandidate reports whether a node has a key in the election: it is
// campaigning or leading.
func (s *State) IsCandidate(id model.NodeID) bool {
	if s.term != nil && s.term.node == id {
		return true
	}
	for _, e := range s.elections {
		if e.node == id {
			return true
		}
	}
	return false
}

// LivenessOf returns a node's persisted liveness. A registered node without
// a record counts as Alive: registration writes both in one transaction, so
// this only happens for a node that is not registered at all.
func (s *State) LivenessOf(id model.NodeID) model.Liveness {
	if l, ok := s.Liveness[id]; ok {
		return l.Record.State
	}
	return model.LivenessAlive
}

// PlacedOnIncarnation says whether a partition's placement belongs to
// the incarnation of its node that is registered now: its route was
// written at or after that registration. A node id is reused when a
// process restarts (a rollout, a service manager), and a route placed
// on the previous process, still naming the id when the new one
// registers, is not the new one's to run: its maintainer places it again
// (next epoch) from where the previous process stopped. Adopting it
// instead raced that placement, and for a moment two dispatchers wrote
// the same partition (measured: 3 to 8 events written twice in 3 of 8
// restart loops). False when the node is not registered.
func (s *State) PlacedOnIncarnation(r RouteRecord) bool {
	n, ok := s.Nodes[r.Route.Node]
	return ok && r.Revision >= n.Revision
}

// NodeIDs returns the registered nodes, sorted.
func (s *State) NodeIDs() []model.NodeID {
	ids := make([]model.NodeID, 0, len(s.Nodes))
	for id := range s.Nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return lessNodeID(ids[i], ids[j]) })
	return ids
}

// MaintainersOn counts the changefeeds whose maintainer is on a node.
func (s *State) MaintainersOn(node model.NodeID) int {
	n := 0
	for _, e := range s.Changefeeds {
		if e.Maintainer.Node == node {
			n++
		}
	}
	return n
}

// PartitionsOn counts the partitions of every changefeed routed to a
// node.
func (s *State) PartitionsOn(node model.NodeID) int {
	n := 0
	for _, ps := range s.Partitions {
		for _, r := range ps {
			if r.Route.Node == node {
				n++
			}
		}
	}
	return n
}

// MaintainerNode is the node maintaining a changefeed (where its
// reader, if it has one, runs); false when it has none now.
func (s *State) MaintainerNode(cf model.ChangefeedID) (model.NodeID, bool) {
	e := s.Changefeeds[cf]
	if e == nil || e.Maintainer.Node == "" {
		return "", false
	}
	return e.Maintainer.Node, true
}

// SchedulableNodeIDs returns the registered nodes that may receive new
// work (Alive), sorted.
func (s *State) SchedulableNodeIDs() []model.NodeID {
	return s.NodesWhere(model.Liveness.IsSchedulable)
}

// IsSchedulable reports whether a registered node may receive work.
func (s *State) IsSchedulable(id model.NodeID) bool {
	_, registered := s.Nodes[id]
	return registered && s.LivenessOf(id).IsSchedulable()
}

// NodesWhere returns the registered nodes whose liveness passes keep, sorted.
func (s *State) NodesWhere(keep func(model.Liveness) bool) []model.NodeID {
	var out []model.NodeID
	for _, id := range s.NodeIDs() {
		if keep(s.LivenessOf(id)) {
			out = append(out, id)
		}
	}
	return out
}

// lessNodeID orders capture-2 before capture-10: by length, then bytes.
func lessNodeID(a, b model.NodeID) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// NodeStates are the nodes as Snapshot has them, without the rest:
// the captures' list and a capture's page ask only these, and a snapshot
// of a cluster of 100,000 partitions lists them all.
func (s *State) NodeStates() []model.NodeState {
	leader, ok := s.Leader()
	out := []model.NodeState{}
	for _, id := range s.NodeIDs() {
		n := s.Nodes[id]
		l := s.Liveness[id]
		out = append(out, model.NodeState{
			Info:             n.Info,
			Liveness:         s.LivenessOf(id),
			NodeRevision:     model.Revision(n.Revision),
			LivenessRevision: model.Revision(l.Revision),
			Coordinator:      ok && leader.Node == id,
		})
	}
	return out
}

// Snapshot turns the state into the planner's model.
func (s *State) Snapshot() model.Snapshot {
	snap := model.Snapshot{ClusterID: s.ClusterID, Revision: model.Revision(s.Revision), Nodes: s.NodeStates()}
	if leader, ok := s.Leader(); ok {
		snap.Coordinator = leader.Node
		snap.CoordinatorEpoch = leader.Fence.Epoch()
	}
	snap.Changefeeds, snap.Partitions = []model.ChangefeedPlacement{}, []model.PartitionState{}
	for _, cf := range s.ChangefeedIDs() {
		e := s.Changefeeds[cf]
		snap.Changefeeds = append(snap.Changefeeds, model.ChangefeedPlacement{
			ID: cf, State: e.Status.State, Maintainer: e.Maintainer, MaintainerRevision: model.Revision(e.MaintainerRevision),
		})
		for _, r := range s.SortedPartitions(cf) {
			snap.Partitions = append(snap.Partitions, model.PartitionState{Route: r.Route, Revision: model.Revision(r.Revision)})
		}
	}
	for _, id := range s.NodeIDs() {
		if s.LivenessOf(id) == model.LivenessDraining {
			snap.Draining = id
		}
	}
	if s.Drain != nil {
		snap.Draining = s.Drain.Target
	}
	return snap
}

// apply folds one key-value change into the state. Values that do not
// decode are skipped: a newer agent may write fields this one cannot read,
// and the rest of the picture is still right.
func (s *State) apply(keys Keys, kv *mvccpb.KeyValue, deleted bool) {
	kind, rest := keys.classify(string(kv.Key))
	switch kind {
	case kindNode:
		id := model.NodeID(rest)
		if deleted {
			delete(s.Nodes, id)
			return
		}
		var info model.NodeInfo
		if json.Unmarshal(kv.Value, &info) == nil {
			s.Nodes[id] = NodeEntry{Info: info, Revision: kv.ModRevision}
		}
	case kindLiveness:
		id := model.NodeID(rest)
		if deleted {
			delete(s.Liveness, id)
			return
		}
		var rec model.LivenessRecord
		if json.Unmarshal(kv.Value, &rec) != nil {
			// Unreadable: keep the node out of scheduling and elections
			// rather than guess it is Alive.
			rec = model.LivenessRecord{State: model.LivenessUnknown}
		}
		s.Liveness[id] = LivenessEntry{Record: rec, Revision: kv.ModRevision}
	case kindElection:
		key := string(kv.Key)
		if deleted {
			delete(s.elections, key)
			return
		}
		s.elections[key] = electionEntry{node: model.NodeID(kv.Value), createRevision: kv.CreateRevision}
	case kindTerm:
		s.termKey = string(kv.Key)
		if deleted {
			s.term = nil
			return
		}
		s.term = &termEntry{node: model.NodeID(kv.Value), modRevision: kv.ModRevision}
	case kindTermMax:
		s.TermEpoch = 0
		if !deleted {
			s.TermEpoch, _ = strconv.ParseUint(string(kv.Value), 10, 64)
		}
	case kindDrain:
		if deleted {
			s.Drain, s.DrainRevision = nil, 0
			return
		}
		var d model.DrainRecord
		if json.Unmarshal(kv.Value, &d) == nil {
			s.Drain, s.DrainRevision = &d, kv.ModRevision
		}
	case kindChangefeed, kindPartition, kindBarrier:
		s.applyChangefeed(kind, rest, kv, deleted)
	case kindPlan:
		if deleted {
			delete(s.Plans, rest)
		} else {
			s.Plans[rest] = RawRecord{Value: kv.Value, Revision: kv.ModRevision}
		}
	case kindPlanRequest:
		if deleted {
			delete(s.PlanRequests, rest)
		} else {
			s.PlanRequests[rest] = string(kv.Value)
		}
	case kindCleanup:
		var c model.SourceCleanup
		if deleted || json.Unmarshal(kv.Value, &c) != nil {
			delete(s.Cleanups, model.ChangefeedID(rest))
		} else {
			s.Cleanups[model.ChangefeedID(rest)] = CleanupEntry{Record: c, Revision: kv.ModRevision}
		}
	case kindRestart:
		var r model.RestartRequest
		if deleted || json.Unmarshal(kv.Value, &r) != nil {
			delete(s.Restarts, model.NodeID(rest))
		} else {
			s.Restarts[model.NodeID(rest)] = RestartEntry{Request: r, Revision: kv.ModRevision}
		}
	}
}

// Apply folds a watch response into the state.
func (s *State) Apply(keys Keys, resp clientv3.WatchResponse) {
	for _, ev := range resp.Events {
		s.apply(keys, ev.Kv, ev.Type == clientv3.EventTypeDelete)
	}
	if resp.Header.Revision > s.Revision {
		s.Revision = resp.Header.Revision
	}
}
