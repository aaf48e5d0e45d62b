package meta

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"unsafe"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ChangefeedEntry is one changefeed as etcd holds it.
type ChangefeedEntry struct {
	Info         model.ChangefeedInfo
	InfoRevision int64
	// InfoCreated is the info key's etcd create revision: a changefeed
	// removed and created again under its name has a new one, which a
	// plan computed before (its fingerprint's revision) never read.
	InfoCreated        int64
	Status             model.ChangefeedStatus
	StatusRevision     int64
	Maintainer         model.MaintainerPlacement
	MaintainerRevision int64 // 0: never placed
}

// RouteRecord is a routing-table entry and its mod-revision.
type RouteRecord struct {
	Route    model.RouteEntry
	Revision int64
}

// ProgressRecord is a partition's persisted position and the
// mod-revision of the changefeed's progress record that holds it.
type ProgressRecord struct {
	Progress model.Progress
	Revision int64
}

// BarrierRecord is a table's DDL barrier and its mod-revision.
type BarrierRecord struct {
	Barrier  model.Barrier
	Revision int64
}

// MaintainerFence proves a maintainer placement: the maintainer key's
// mod-revision when the placement was made. Any new placement changes it.
type MaintainerFence struct {
	Key      string
	Revision int64
	Epoch    uint64
}

// FenceOf returns the fence of a changefeed's current maintainer placement.
func (e *ChangefeedEntry) FenceOf(k Keys) MaintainerFence {
	return MaintainerFence{Key: k.Maintainer(e.Info.ID), Revision: e.MaintainerRevision, Epoch: e.Maintainer.Epoch}
}

// SortedPartitions returns a changefeed's routing table by table and start.
func (s *State) SortedPartitions(cf model.ChangefeedID) []RouteRecord {
	m := s.Partitions[cf]
	id := s.RoutesID(cf)
	if s.sortedMu != nil {
		s.sortedMu.Lock()
		c, ok := s.sorted[cf]
		s.sortedMu.Unlock()
		if ok && c.m == id && len(c.routes) == len(m) {
			return c.routes
		}
	}
	out := make([]RouteRecord, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Route.Span, out[j].Route.Span
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		return a.Start < b.Start
	})
	if s.sortedMu != nil {
		s.sortedMu.Lock()
		c := s.sorted[cf]
		if c.m != id {
			c = sortedRoutes{m: id}
		}
		c.routes = out
		s.sorted[cf] = c
		s.sortedMu.Unlock()
	}
	return out
}

// RoutesID identifies a changefeed's routing table as of this state: two
// published states with the same id for it have the same table (inner
// maps are replaced, never changed, once a state is published). A caller
// that keeps an id keeps the table alive, so the id is never reused.
func (s *State) RoutesID(cf model.ChangefeedID) unsafe.Pointer {
	return reflect.ValueOf(s.Partitions[cf]).UnsafePointer()
}

// BarriersID is RoutesID for a changefeed's DDL barriers.
func (s *State) BarriersID(cf model.ChangefeedID) unsafe.Pointer {
	return reflect.ValueOf(s.Barriers[cf]).UnsafePointer()
}

// sortedRoutes is a changefeed's routing table in order, for the inner
// map it was made from. Sorting 100,000 partitions on every maintainer
// pass was a seventh of the coordinator's CPU; the routing table changes
// far less often than the passes run.
type sortedRoutes struct {
	m      unsafe.Pointer // the map sorted
	routes []RouteRecord
	// perNode counts the partitions by the node holding them, once asked
	// (ChangefeedPartitionsOn); counted is how many it counted.
	perNode map[model.NodeID]int
	counted int
}

// ChangefeedPartitionsOn counts changefeed cf's partitions held by node (its
// Route.Node, moves away from it included). The count is kept with the
// sorted routing table: a drain's progress is asked on every change of
// the cluster's state, and counting 20,000 partitions each time was a
// thirteenth of a loaded cluster's CPU during a drain. It is counted
// from the routing table as it is, not sorted first: during a drain
// every changefeed's table changes, on every node (its drain metrics),
// and the sorts were about 3 % of the cluster's CPU.
func (s *State) ChangefeedPartitionsOn(cf model.ChangefeedID, node model.NodeID) int {
	m := s.Partitions[cf]
	if len(m) == 0 {
		return 0
	}
	id := s.RoutesID(cf)
	if s.sortedMu != nil {
		s.sortedMu.Lock()
		c, ok := s.sorted[cf]
		s.sortedMu.Unlock()
		if ok && c.m == id && c.counted == len(m) && c.perNode != nil {
			return c.perNode[node]
		}
	}
	perNode := map[model.NodeID]int{}
	for _, r := range m {
		perNode[r.Route.Node]++
	}
	if s.sortedMu != nil {
		s.sortedMu.Lock()
		c := s.sorted[cf]
		if c.m != id {
			c = sortedRoutes{m: id}
		}
		c.perNode, c.counted = perNode, len(m)
		s.sorted[cf] = c
		s.sortedMu.Unlock()
	}
	return perNode[node]
}

// forgetSorted drops a changefeed's sorted routing table: its map is
// about to change in place.
func (s *State) forgetSorted(cf model.ChangefeedID) {
	if s.sortedMu != nil {
		s.sortedMu.Lock()
		delete(s.sorted, cf)
		s.sortedMu.Unlock()
	}
}

// ChangefeedIDs returns the changefeeds, sorted.
func (s *State) ChangefeedIDs() []model.ChangefeedID {
	var out []model.ChangefeedID
	for id := range s.Changefeeds {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// applyChangefeed folds a change under changefeeds/, partitions/ or
// barriers/ into the state.
func (s *State) applyChangefeed(kind keyKind, rest string, kv *mvccpb.KeyValue, deleted bool) {
	cf, leaf, ok := strings.Cut(rest, "/")
	if !ok || leaf == "" {
		return
	}
	id := model.ChangefeedID(cf)
	switch {
	case kind == kindChangefeed && leaf == "progress":
		s.applyProgress(id, legacyShard, kv, deleted)
	case kind == kindChangefeed && strings.HasPrefix(leaf, "progress/"):
		s.applyProgress(id, strings.TrimPrefix(leaf, "progress/"), kv, deleted)
	case kind == kindChangefeed:
		e := s.Changefeeds[id]
		if e == nil {
			if deleted {
				return
			}
			e = &ChangefeedEntry{}
		} else {
			c := *e
			e = &c
		}
		switch leaf {
		case "info":
			if deleted {
				delete(s.Changefeeds, id)
				return
			}
			if json.Unmarshal(kv.Value, &e.Info) == nil {
				e.InfoRevision, e.InfoCreated = kv.ModRevision, kv.CreateRevision
			}
		case "status":
			var st model.ChangefeedStatus
			if !deleted && json.Unmarshal(kv.Value, &st) == nil {
				e.Status, e.StatusRevision = st, kv.ModRevision
			}
		case "maintainer":
			if deleted {
				e.Maintainer, e.MaintainerRevision = model.MaintainerPlacement{}, 0
			} else if json.Unmarshal(kv.Value, &e.Maintainer) == nil {
				e.MaintainerRevision = kv.ModRevision
			}
		}
		s.Changefeeds[id] = e
	case kind == kindPartition:
		s.forgetSorted(id)
		// Routing entries are read by hand (model.DecodeRouteEntry): every
		// node decodes every one written, two for each move of a drain.
		s.Partitions[id] = applyRecord(s.Partitions[id], s.mine(kind, id, 0, len(s.Partitions[id])), leaf, kv, deleted, model.DecodeRouteEntry, func(r model.RouteEntry, rev int64) RouteRecord {
			return RouteRecord{Route: r, Revision: rev}
		})
	case kind == kindBarrier:
		s.Barriers[id] = applyRecord(s.Barriers[id], s.mine(kind, id, 0, len(s.Barriers[id])), leaf, kv, deleted, decodeJSON[model.Barrier], func(b model.Barrier, rev int64) BarrierRecord {
			return BarrierRecord{Barrier: b, Revision: rev}
		})
	}
}

// applyRecord returns one changefeed's map with one record put or
// deleted, copied first unless the state already owns it (State.mine); a
// value that does not decode leaves the record as it was.
func applyRecord[T, R any](m map[string]R, owned bool, leaf string, kv *mvccpb.KeyValue, deleted bool, decode func([]byte) (T, error), wrap func(T, int64) R) map[string]R {
	if !owned || m == nil {
		m = cloneMap(m)
	}
	if deleted {
		delete(m, leaf)
		return m
	}
	if v, err := decode(kv.Value); err == nil {
		m[leaf] = wrap(v, kv.ModRevision)
	}
	return m
}

// decodeJSON decodes a record with encoding/json.
func decodeJSON[T any](b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

// cloneMap copies one changefeed's map, so a published state is never
// changed under its readers.
func cloneMap[V any](m map[string]V) map[string]V {
	c := make(map[string]V, len(m)+1)
	for k, v := range m {
		c[k] = v
	}
	return c
}
