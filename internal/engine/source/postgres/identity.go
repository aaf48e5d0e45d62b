package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// identityChanged deals with a relation message (of rel, table name)
// whose replica identity is an index of other columns (def's key) than
// the table's key was: held when those are not the primary key the
// catalog has now. It reports whether the message was dealt with (the
// table held, or what cannot be read said by unreadable, relation's).
func (s *Stream) identityChanged(ctx context.Context, rel uint32, name string, def *source.TableDef, unreadable func(string, error) error) (bool, error) {
	// The message flags the replica identity's columns: an index of
	// other columns than the key, set while the changefeed ran (its
	// creation refuses one, identityUnfit), reads as a new key,
	// and the table's rows were keyed by it from here, against
	// partitions cut on the primary key. Where the flagged columns
	// are not the primary key the catalog has now, the identity
	// changed, not (only) the key: held, saying so.
	now, err := s.cat.tableDef(ctx, name)
	if err != nil {
		return true, unreadable("its primary key", err)
	}
	if len(now.KeyNames()) == 0 {
		s.rels[rel].held = true
		return true, s.holdToCopy(ctx, rel, name, keyDroppedHold(s.changefeed(), name))
	}
	if !sameNames(now.KeyNames(), def.KeyNames()) {
		s.rels[rel].held = true
		s.hold(name, identityChangedHold(s.changefeed(), name, def.KeyNames(), now.KeyNames()))
		return true, nil
	}
	return false, nil
}

// identityChangedHold says why a table is held when its replica identity
// is no longer its primary key: an index of other columns (index), or
// none (the index dropped: no column flagged).
func identityChangedHold(cf, table string, index, key []string) string {
	what := "was set to an index of (" + strings.Join(index, ", ") + ")"
	if len(index) == 0 {
		what = "is an index no longer there (dropped), which leaves none"
	}
	return fmt.Sprintf("its replica identity %s, not its primary key (%s): its UPDATEs and DELETEs carry only that index's columns of the old row from here, and the changefeed routes rows by the primary key, so its changes from here are held: ALTER TABLE %s REPLICA IDENTITY DEFAULT (or FULL), then copy the table again with %s",
		what, strings.Join(key, ", "), table, copySteps(cf, table))
}
