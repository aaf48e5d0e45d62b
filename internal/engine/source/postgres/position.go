package postgres

import (
	"sort"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// position is the puller's resume point: the end of a transaction, the
// commit position it was given, and every table's schema there. Reading
// on from it gives every later transaction the position it had before.
type position struct {
	LSN    string                `json:"lsn"`
	Ts     model.Ts              `json:"ts"`
	Tables map[string]TableState `json:"tables"`
	// Gone are the tables removed from the changefeed (changefeed
	// update), each with the changefeed's position then: the WAL read
	// again from before it still holds their rows, which are dropped.
	Gone map[string]model.Ts `json:"gone,omitempty"`
	// GoneAt is, for each of them, the database's clock when it was
	// removed: a relation of the changefeed's that has the removed name
	// in a transaction committed after that was renamed to it since (a
	// table renamed back to the name it had), not the removed table of
	// before its rename (empty for removals written before it was kept).
	GoneAt map[string]model.Ts `json:"gone_at,omitempty"`
	// Parts are the relations of each table's partition tree that are
	// in its snapshot or were marked to copy (attached.go: a partition
	// attached since is not among them), for the tables that have
	// partitions; PartsKnown says they were read (a resume point written
	// before they were kept has none).
	Parts      map[string][]uint32 `json:"parts,omitempty"`
	PartsKnown bool                `json:"parts_known,omitempty"`
	// System is the system identifier of the database cluster the
	// position was read from (IDENTIFY_SYSTEM; a physical replica
	// promoted has its primary's): an LSN means nothing on another
	// cluster. Empty in a resume point written before it was kept; the
	// next run fills it in.
	System string `json:"system,omitempty"`
	// Timeline is the server's timeline where the position was read
	// (IDENTIFY_SYSTEM): a standby promoted since branched from it at a
	// point of its own, and a position past that point is not in its
	// history (sameHistory). 0 in a resume point written before it was
	// kept.
	Timeline int32 `json:"timeline,omitempty"`
	// Labels are the database's enum values' labels as the reader's last
	// look before the position read them (relabel.go): a source opened
	// anew compares its first look with them, and copies again the
	// tables of a value renamed while no reader looked (values that
	// were not there before are new, not renamed). Nil in a resume point
	// written before they were kept, or of a database with more than
	// maxKeptLabels values: its first look only reads them. LabelsAt is
	// the database's clock when they were read: a source that ran
	// before, and maintains the changefeed again, keeps its own only
	// when they are newer.
	Labels   map[uint32]enumLabel `json:"labels,omitempty"`
	LabelsAt int64                `json:"labels_at,omitempty"`
}

// oids are the relations the position knows its tables by.
func (p position) oids() map[string]uint32 {
	out := make(map[string]uint32, len(p.Tables))
	for t, st := range p.Tables {
		out[t] = st.OID
	}
	return out
}

// ResumePoint implements source.Puller: the last transaction end at or
// below the checkpoint. Points before it are dropped: checkpoints only
// grow.
func (s *Source) ResumePoint(checkpoint model.Ts) (source.Position, bool) {
	s.mu.Lock()
	i := sort.Search(len(s.points), func(i int) bool { return s.points[i].Ts > checkpoint }) - 1
	if i < 0 {
		s.mu.Unlock()
		return nil, false
	}
	p := s.points[i]
	s.points = s.points[i:]
	s.mu.Unlock()
	return s.kept.Encode(p.Ts, p, func(err error) {
		s.log.Error("postgres source: the changefeed's resume point cannot be kept: its checkpoint is saved with the one kept before, the slot keeps its WAL from there and a restart reads again from there", "err", err)
	})
}

// Confirm implements source.Puller: the slot's confirmed position moves
// to a persisted resume point.
func (s *Source) Confirm(pos source.Position) {
	var p position
	if source.DecodePosition(pos, &p) != nil {
		return
	}
	lsn, err := pglogrepl.ParseLSN(p.LSN)
	if err != nil {
		return
	}
	s.mu.Lock()
	if s.stream != nil {
		s.stream.Confirm(lsn)
	}
	s.mu.Unlock()
}
