package exec

import (
	"context"
	"encoding/json"
	"fmt"
)

// Store keeps plan records. The engine's is the coordinator's, over etcd
// (coordinator.PlanStore): a save is fenced by the coordinator's term and
// conditional on the revision the record was read at, so a record is
// never written over by a writer that did not read the latest.
type Store interface {
	// Save writes rec over the revision it was read at (0: a new plan,
	// which must not exist) and returns the new revision.
	Save(ctx context.Context, rec *Record, revision int64) (int64, error)
}

// Decode reads a stored record: the one place a plan record's JSON is
// read back. (The agent's metrics read two fields of every plan on each
// pass with types of their own, to skip decoding a large plan's steps.)
func Decode(raw []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("a stored plan record does not decode: %w", err)
	}
	return &r, nil
}
