package postgres

// A table taken out of the publication is found exactly where the
// changefeed's triggers run (a superuser's changefeed on PostgreSQL 14
// and later, rewrites.go): before and after each ALTER PUBLICATION, in
// its transaction, a mark lists the relations the changefeed's
// publication sends. The stream meets both at the ALTER's commit and
// holds, from that transaction, every table of the changefeed the
// publication sent before and not after. Unlike the catalog's look
// (unpublished.go), which goes on for the changefeeds without triggers,
// a removal undone before the next look is held all the same, and so is
// one a reader started again from before it meets again. A table the
// publication did not send before the ALTER either (one that joins the
// changefeed later, one it never sent) is left to the look.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// publicationKind is the kind of the marks before and after an ALTER
// PUBLICATION.
const publicationKind = "publication"

// publicationMark is what the triggers' function writes: the
// changefeed's slot, the trigger's event (ddl_command_start: before;
// ddl_command_end: after), the relations the publication sends, and
// whether it sends a partitioned table's rows under its own name (nil:
// there is no such publication, as after it was renamed).
type publicationMark struct {
	markHead
	Phase   string   `json:"phase"`
	ViaRoot *bool    `json:"viaroot"`
	Rels    []uint32 `json:"rels"`
	// Publish is pubinsert, pubupdate, pubdelete, pubtruncate; Narrowed
	// the relations sent with a row filter or a column list.
	Publish  []bool   `json:"publish"`
	Narrowed []uint32 `json:"narrowed"`
}

// publicationMarked takes a mark of an ALTER PUBLICATION met in the open
// transaction; it says whether content was one (none goes on to the
// partitions).
func (s *Stream) publicationMarked(content []byte) bool {
	var m publicationMark
	if ok, mine := s.readMark(content, publicationKind, &m); !ok || !mine {
		return ok // not one; or another changefeed's, on the same database
	}
	if m.Phase == "ddl_command_start" {
		s.pubBefore = &m
		return true
	}
	before := s.pubBefore
	s.pubBefore = nil
	if before == nil || before.ViaRoot == nil || m.ViaRoot == nil {
		// Its ALTER's first mark failed (the function warned): the look
		// is left. Or the publication was renamed away: the stream fails
		// at its next change, saying so (publicationGone).
		return true
	}
	sent, sends, narrowed := set(before.Rels), set(m.Rels), set(m.Narrowed)
	wasNarrowed := set(before.Narrowed)
	// The changes the publication sent before and does not now, of every
	// table.
	var stopped []string
	for i, what := range []string{"inserts", "updates", "deletes", "truncates"} {
		if i < len(before.Publish) && i < len(m.Publish) && before.Publish[i] && !m.Publish[i] {
			stopped = append(stopped, what)
		}
	}
	var names, narrowing, stopping []string
	for name, st := range s.tables {
		_, held := s.held[name]
		_, gone := s.gone[name]
		if st.OID == 0 || st.Def == nil || !sent[st.OID] || held || gone || s.unread(st) {
			continue
		}
		switch {
		case !sends[st.OID]:
			names = append(names, name)
		case len(stopped) > 0:
			stopping = append(stopping, name)
		case narrowed[st.OID] && !wasNarrowed[st.OID]:
			narrowing = append(narrowing, name)
		}
	}
	slices.Sort(stopping)
	for _, name := range stopping {
		why := stoppedReason(s.cfg, s.changefeed(), name, stopped)
		if st := s.tables[name]; narrowed[st.OID] && !wasNarrowed[st.OID] {
			why += "; it also sends only some of its rows or columns now (a row filter or a column list): publish it whole again before the copy (" + wholeAgain(s.cfg, name) + ")"
		}
		s.hold(name, why)
	}
	slices.Sort(narrowing)
	for _, name := range narrowing {
		s.hold(name, narrowedReason(s.cfg, s.changefeed(), name))
	}
	slices.Sort(names)
	for _, name := range names {
		// publish_via_partition_root turned off: a partitioned table's
		// rows go under its partitions' names; turned on: a partition's
		// under its root's.
		why := unpublishedReason(s.cfg, s.changefeed(), name, *before.ViaRoot && !*m.ViaRoot, false)
		if !*before.ViaRoot && *m.ViaRoot {
			why = viaRootReason(s.cfg, s.changefeed(), name)
		}
		s.hold(name, why)
	}
	return true
}

// viaRootReason says why a partition replicated on its own is held once
// its publication publishes partitions' rows under their root's name.
func viaRootReason(cfg Config, cf, table string) string {
	return fmt.Sprintf("publication %s publishes its rows under the name of the partitioned table it belongs to now (publish_via_partition_root on), which the changefeed does not replicate: its changes since are lost; ALTER PUBLICATION %s SET (publish_via_partition_root = false), then copy it again (%s), or replicate the partitioned table instead",
		cfg.Publication, cfg.Publication, copySteps(cf, table))
}

// set is a mark's relations as a set.
func set(rels []uint32) map[uint32]bool {
	out := make(map[uint32]bool, len(rels))
	for _, r := range rels {
		out[r] = true
	}
	return out
}

// stoppedReason says why a table is held once its publication no longer
// sends some kinds of change (publish=).
func stoppedReason(cfg Config, cf, table string, stopped []string) string {
	return fmt.Sprintf("publication %s no longer sends %s (ALTER PUBLICATION … SET (publish = …)): PostgreSQL sends none of those changes since, and they are lost; ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate'), then copy it again: %s",
		cfg.Publication, strings.Join(stopped, ", "), cfg.Publication, copySteps(cf, table))
}

// narrowedReason says why a table is held once its publication sends
// only some of its rows or columns.
func narrowedReason(cfg Config, cf, table string) string {
	return fmt.Sprintf("publication %s sends only some of its rows or columns now (a row filter or a column list, ALTER PUBLICATION … SET TABLE): the changes it leaves out since are lost, and the changefeed copies whole tables; publish it whole again (%s), then copy it again: %s",
		cfg.Publication, wholeAgain(cfg, table), copySteps(cf, table))
}

// wholeAgain is the statement that publishes a table whole again, without
// its row filter or column list.
func wholeAgain(cfg Config, table string) string {
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	return fmt.Sprintf("BEGIN; ALTER PUBLICATION %s DROP TABLE ONLY %s; ALTER PUBLICATION %s ADD TABLE ONLY %s; COMMIT", pub, quoteQualified(table), pub, quoteQualified(table))
}
