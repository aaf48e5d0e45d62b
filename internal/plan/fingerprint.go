package plan

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Fingerprint records the etcd mod-revision of exactly the objects a plan
// read. The cluster refuses a plan whose objects changed; a write to
// anything else (a checkpoint, another changefeed's progress) leaves it
// valid.
type Fingerprint struct {
	Revision model.Revision            `json:"revision"`
	Objects  map[string]model.Revision `json:"objects"`
	// AllNodes: the plan chose among all captures, so a capture that
	// joined since would have changed it.
	AllNodes bool `json:"all_nodes,omitempty"`
	// Placements: for each partition read, a digest of where it is and
	// what it covers. A partition whose revision moved but whose
	// placement did not (its dispatcher was recovered in place, its
	// progress was handed over) leaves the plan valid: without this,
	// every recovery during a sink fault made every plan stale.
	Placements map[string]string `json:"placements,omitempty"`
	// Partitions: for a plan that read every partition (a drain, a
	// rollout), per changefeed a digest of its partitions' ids and
	// placements, instead of an object and a placement per partition:
	// a million of those made a drain's plan file 80 MiB and most of its
	// planning and checking time. A recovery in place leaves the digest
	// as it was, as it leaves a placement; a partition moved, split,
	// added or removed changes it.
	Partitions map[model.ChangefeedID]PartitionsDigest `json:"partitions,omitempty"`
}

// PartitionsDigest digests one changefeed's partitions: how many, a sum
// of each one's hash of its id and placement (so that no order is
// needed), and the highest revision among them (for the message when it
// changed).
type PartitionsDigest struct {
	Digest   string         `json:"digest"`
	Revision model.Revision `json:"revision"`
}

// fingerprintAll records every capture, liveness and maintainer of a
// snapshot, and its partitions by changefeed: what a plan that reads the
// whole cluster read.
func fingerprintAll(s *model.Snapshot) Fingerprint {
	objects := make(map[string]model.Revision, 2*len(s.Nodes)+len(s.Changefeeds))
	addClusterObjects(objects, s)
	return Fingerprint{Revision: s.Revision, Objects: objects, AllNodes: true, Partitions: partitionsDigests(s)}
}

// appendPartition appends a partition's id and what placementDigest
// covers, each field after its length. (Its own encoding, not
// placementDigest's JSON: half the bytes to hash at a million
// partitions; TestBothDigestsCoverTheSameFields keeps the two lists one.)
func appendPartition(b []byte, r model.RouteEntry) []byte {
	for _, f := range [...]string{r.ID, r.Span.Table, r.Span.Start, r.Span.End, r.Span.Key, string(r.Node), string(r.Status), string(r.Target), r.SplitKey} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	if r.Pinned {
		return append(b, 1)
	}
	return append(b, 0)
}

// fnv64a is FNV-1a of b (hash/fnv's, without its allocation per call).
func fnv64a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// partitionsDigests digests every changefeed's partitions.
func partitionsDigests(s *model.Snapshot) map[model.ChangefeedID]PartitionsDigest {
	type acc struct {
		n   int
		sum uint64
		rev model.Revision
	}
	by := make(map[model.ChangefeedID]*acc, len(s.Changefeeds))
	b := make([]byte, 0, 128)
	for i := range s.Partitions {
		p := &s.Partitions[i]
		a := by[p.Route.Changefeed]
		if a == nil {
			a = &acc{}
			by[p.Route.Changefeed] = a
		}
		a.n++
		a.sum += fnv64a(appendPartition(b[:0], p.Route))
		a.rev = max(a.rev, p.Revision)
	}
	out := make(map[model.ChangefeedID]PartitionsDigest, len(by))
	for cf, a := range by {
		out[cf] = PartitionsDigest{Digest: fmt.Sprintf("%d:%016x", a.n, a.sum), Revision: a.rev}
	}
	return out
}

// fingerprintOf records only the objects a plan read.
func fingerprintOf(s *model.Snapshot, objects ...string) Fingerprint {
	names := make(map[string]model.Revision, len(objects))
	for _, o := range objects {
		names[o] = 0
	}
	revs, placed := lookupObjects(s, names)
	f := Fingerprint{Revision: s.Revision, Objects: names, Placements: placed}
	for o := range names {
		names[o] = revs[o] // 0: it does not exist
	}
	return f
}

// lookupObjects returns the revision of each named object that exists in
// s, and the placement digest of each named partition, without listing
// every object of s: a move's check at a million partitions built a map
// of them all to read four.
func lookupObjects(s *model.Snapshot, names map[string]model.Revision) (map[string]model.Revision, map[string]string) {
	revs := make(map[string]model.Revision, len(names))
	type key struct {
		cf model.ChangefeedID
		id string
	}
	parts := map[key]string{}
	for o := range names {
		if rest, ok := strings.CutPrefix(o, "partition/"); ok {
			// A changefeed's name has no '/' (model.ValidateChangefeedID).
			cf, id, _ := strings.Cut(rest, "/")
			parts[key{model.ChangefeedID(cf), id}] = o
		}
	}
	look := func(o string, rev model.Revision) {
		if _, ok := names[o]; ok {
			revs[o] = rev
		}
	}
	for _, n := range s.Nodes {
		look(nodeObject(n.Info.ID), n.NodeRevision)
		look(livenessObject(n.Info.ID), n.LivenessRevision)
	}
	for _, cf := range s.Changefeeds {
		look(maintainerObject(cf.ID), cf.MaintainerRevision)
	}
	placed := make(map[string]string, len(parts))
	for i := 0; i < len(s.Partitions) && len(parts) > 0; i++ {
		p := &s.Partitions[i]
		if o, ok := parts[key{p.Route.Changefeed, p.Route.ID}]; ok {
			revs[o], placed[o] = p.Revision, placementDigest(p.Route)
		}
	}
	return revs, placed
}

// placementDigest covers what a plan decides on: the span, the owner,
// the status and an operation under way. The epoch, the handed-over
// start and the history are left out; they change with a recovery. So
// are the span's key columns: they never change in place (a re-snapshot
// makes new partitions), and a cdcctl or an agent of a version without
// them digests without them: with them, every plan between the two
// versions was stale, recomputed or not.
//
// The digest is FNV-1a of the JSON encoding/json gives the struct
// placementJSON (plans saved by earlier versions carry it), written here
// without reflection: a million of them were most of a large drain's
// planning and of its check.
func placementDigest(r model.RouteEntry) string {
	b := appendPlacement(make([]byte, 0, 160), r)
	var out [16]byte
	hex.Encode(out[:], binary.BigEndian.AppendUint64(nil, fnv64a(b)))
	return string(out[:])
}

// appendPlacement appends what placementDigest digests.
func appendPlacement(b []byte, r model.RouteEntry) []byte {
	b = append(b, `{"Span":{"table":`...)
	b = appendJSONString(b, r.Span.Table)
	b = append(b, `,"start":`...)
	b = appendJSONString(b, r.Span.Start)
	b = append(b, `,"end":`...)
	b = appendJSONString(b, r.Span.End)
	if r.Span.Key != "" {
		b = append(b, `,"key":`...)
		b = appendJSONString(b, r.Span.Key)
	}
	b = append(b, `},"Node":`...)
	b = appendJSONString(b, string(r.Node))
	b = append(b, `,"Status":`...)
	b = appendJSONString(b, string(r.Status))
	b = append(b, `,"Target":`...)
	b = appendJSONString(b, string(r.Target))
	b = append(b, `,"SplitKey":`...)
	b = appendJSONString(b, r.SplitKey)
	b = append(b, `,"Pinned":`...)
	b = strconv.AppendBool(b, r.Pinned)
	return append(b, '}')
}

// placementJSON is what placementDigest encodes, field for field.
type placementJSON struct {
	Span     model.Span
	Node     model.NodeID
	Status   model.PartitionStatus
	Target   model.NodeID
	SplitKey string
	Pinned   bool
}

// appendJSONString appends s as encoding/json quotes it: printable
// ASCII other than the characters it escapes as is, anything else
// through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Object names, stable across versions.
func nodeObject(id model.NodeID) string             { return "node/" + string(id) }
func livenessObject(id model.NodeID) string         { return "liveness/" + string(id) }
func maintainerObject(cf model.ChangefeedID) string { return "maintainer/" + string(cf) }
func partitionObject(cf model.ChangefeedID, pid string) string {
	return "partition/" + string(cf) + "/" + pid
}

// addClusterObjects adds the captures, their liveness and the
// maintainers: every object but the partitions.
func addClusterObjects(out map[string]model.Revision, s *model.Snapshot) {
	for _, n := range s.Nodes {
		out[nodeObject(n.Info.ID)] = n.NodeRevision
		out[livenessObject(n.Info.ID)] = n.LivenessRevision
	}
	for _, cf := range s.Changefeeds {
		out[maintainerObject(cf.ID)] = cf.MaintainerRevision
	}
}

// partitionsObject names a changefeed's partitions as a whole, in a
// plan that digested them together.
func partitionsObject(cf model.ChangefeedID) string { return "partitions/" + string(cf) }

// Change is one object that moved since a plan was computed.
type Change struct {
	Object string         `json:"object"`
	Was    model.Revision `json:"was"` // 0: it did not exist
	Now    model.Revision `json:"now"` // 0: it is gone
}

func (c Change) String() string {
	switch {
	case c.Was == 0:
		return c.Object + " appeared"
	case c.Now == 0:
		return c.Object + " is gone"
	case c.Now == c.Was:
		return c.Object + " changed" // a digest of several objects
	}
	return fmt.Sprintf("%s changed (revision %d → %d)", c.Object, c.Was, c.Now)
}

// Check tells whether a plan is stale against a newer snapshot: it lists
// every object the plan read that changed, and every new capture (which
// would have been a candidate destination). Nil means the plan still holds.
func Check(p *Plan, now *model.Snapshot) []Change {
	cur, placed := lookupObjects(now, p.Fingerprint.Objects)
	var out []Change
	if p.Fingerprint.Partitions != nil {
		digests := partitionsDigests(now)
		for cf, was := range p.Fingerprint.Partitions {
			if got, ok := digests[cf]; !ok || got.Digest != was.Digest {
				out = append(out, Change{Object: partitionsObject(cf), Was: was.Revision, Now: got.Revision})
			}
		}
	}
	for obj, was := range p.Fingerprint.Objects {
		got := cur[obj]
		if got == was {
			continue
		}
		if d, ok := p.Fingerprint.Placements[obj]; ok && got != 0 && placed[obj] == d {
			continue
		}
		out = append(out, Change{Object: obj, Was: was, Now: got})
	}
	for _, n := range now.Nodes {
		if !p.Fingerprint.AllNodes {
			break
		}
		obj := nodeObject(n.Info.ID)
		if _, read := p.Fingerprint.Objects[obj]; !read {
			out = append(out, Change{Object: obj, Now: n.NodeRevision})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Object < out[j].Object })
	return out
}

// StaleError refuses a plan whose objects changed since it was computed.
type StaleError struct {
	Changes []Change
}

func (e *StaleError) Error() string {
	const most = 5
	var b strings.Builder
	fmt.Fprintf(&b, "the plan is stale: %d object(s) it read changed since it was computed:", len(e.Changes))
	for i, c := range e.Changes {
		if i == most {
			fmt.Fprintf(&b, " and %d more", len(e.Changes)-most)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(" " + c.String())
	}
	return b.String()
}
