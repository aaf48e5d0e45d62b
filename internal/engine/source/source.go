// Package source defines where row changes come from: the event a source
// yields and the reader one partition uses. Implementations live in
// subpackages (gen: the deterministic generator).
//
// It imports model only.
package source

import "github.com/cdcctl/cdcctl/internal/model"

// Kind says what an event is.
type Kind uint8

const (
	KindDML Kind = iota + 1 // a row change of one key
	KindDDL                 // a schema change of one table
)

func (k Kind) String() string {
	switch k {
	case KindDML:
		return "DML"
	case KindDDL:
		return "DDL"
	}
	return "Kind(?)"
}

// Column is one column of a row.
type Column struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Event is one change.
type Event struct {
	Kind     Kind
	Table    string
	CommitTs model.Ts
	// Schema is the table's schema version the event belongs to: for a DML
	// the version the row was written under, for a DDL the version it
	// creates.
	Schema uint64
	// TableVersion is when that schema version began: the commit ts of
	// the DDL that created it, or the source's start for the first one.
	// Storage sinks name directories after it.
	TableVersion model.Ts
	// DML only.
	Key     string
	Version uint64 // per-key version, 1 for the first change of a key
	Columns []Column
	// DDL only.
	Statement string
}

// Reader reads one partition's key range in commit-ts order.
type Reader interface {
	// Read returns the DML events with commit ts in (Position(), upTo],
	// oldest first, stopping after about max events; it never splits the
	// events of one commit ts, so Position() afterwards is exact. It
	// returns nil when nothing is left up to upTo.
	Read(upTo model.Ts, max int) []Event
	// Position is the commit ts up to which every event has been returned.
	Position() model.Ts
}

// Lookahead is a Reader that knows when its next event commits. A
// dispatcher with nothing to read sleeps until then instead of polling,
// and meanwhile reports its position as reaching it: nothing of its span
// commits in between.
type Lookahead interface {
	// NextAt is the commit ts of the next event after Position(); false
	// if there will be none.
	NextAt() (model.Ts, bool)
}

// DDLSchedule is a source that knows when a table's next DDL commits.
type DDLSchedule interface {
	// NextDDL is the commit ts of the table's first DDL after ts; false
	// if there will be none.
	NextDDL(table string, after model.Ts) (model.Ts, bool)
}
