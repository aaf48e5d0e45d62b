package verify

import (
	"slices"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A rebuild holds a table's rows by their key while the table has a
// primary key (keyedRows), and as a multiset while it has none
// (keylessRows). A table's key can change under a changefeed (ALTER TABLE
// ... ADD PRIMARY KEY on a table replicated by its whole rows, a key of
// other columns, DROP CONSTRAINT ..._pkey): its rows are then the same
// rows under another key, so the rebuild moves them into a set of the new
// kind where the sink shows the change — at the schema change that made
// it, where the sink's schema files name the key, else at the first row
// written under the new key — as a consumer applying the statement does.

// rowSet is a table's rows in a rebuild.
type rowSet interface {
	// key names the key columns; none for a table without a key.
	key() []string
	add(row map[string]*string)
	apply(c *codec.Change)
	step(st schemaStep)
	each(func(row map[string]*string))
	rows() Rows
}

// newRowSet is an empty set of rows under key.
func newRowSet(key []string) rowSet {
	if len(key) == 0 {
		return &keylessRows{byImage: map[string][]int{}}
	}
	return &keyedRows{names: key, byKey: Rows{}}
}

// rekey moves set's rows into a set under key, when that is another key.
func rekey(set rowSet, key []string) rowSet {
	if slices.Equal(set.key(), key) {
		return set
	}
	next := newRowSet(key)
	set.each(next.add)
	return next
}

// underKey are rows (as an upstream keys them) under key.
func underKey(rows Rows, key []string) Rows {
	set := newRowSet(key)
	for _, row := range rows {
		set.add(row)
	}
	return set.rows()
}

// keyedRows are a table's rows by key (model.JoinKeyTexts, as
// codec.Change.Key writes it).
type keyedRows struct {
	names []string
	byKey Rows
}

func (s *keyedRows) key() []string { return s.names }

func (s *keyedRows) add(row map[string]*string) {
	s.byKey[(&codec.Change{PkNames: s.names, Data: row}).Key()] = row
}

// apply applies a change; a column the change left out keeps its value.
func (s *keyedRows) apply(c *codec.Change) {
	k := c.Key()
	if c.Op == "DELETE" {
		delete(s.byKey, k)
		return
	}
	row := map[string]*string{}
	for col, v := range s.byKey[k] {
		row[col] = v
	}
	for col, v := range c.Data {
		row[col] = v
	}
	s.byKey[k] = row
}

func (s *keyedRows) step(st schemaStep) {
	if st.truncate {
		s.byKey = Rows{}
		return
	}
	for _, row := range s.byKey {
		st.fill(row)
	}
}

func (s *keyedRows) each(f func(map[string]*string)) {
	for _, row := range s.byKey {
		f(row)
	}
}

func (s *keyedRows) rows() Rows { return s.byKey }

// keylessRows are a table's rows without a key: a multiset, keyed at the
// end as the upstream keys them (model.ImageKey). A delete removes one
// row equal to the row it carries; an update changes one row equal to its
// old image (its row with the old values of the columns it changed). A
// change of a row that is not there adds its new row, or does nothing for
// a delete.
type keylessRows struct {
	live    []map[string]*string // nil once removed
	byImage map[string][]int     // image -> indexes in live
}

func image(r map[string]*string) string { return model.ImageKey(r, 0) }

func (s *keylessRows) key() []string { return nil }

func (s *keylessRows) add(r map[string]*string) {
	s.byImage[image(r)] = append(s.byImage[image(r)], len(s.live))
	s.live = append(s.live, r)
}

// take removes and returns one row equal to r on r's columns (an
// unchanged TOAST value is left out of a change).
func (s *keylessRows) take(r map[string]*string) map[string]*string {
	if ids := s.byImage[image(r)]; len(ids) > 0 {
		i := ids[len(ids)-1]
		s.byImage[image(r)] = ids[:len(ids)-1]
		row := s.live[i]
		s.live[i] = nil
		return row
	}
	for i, row := range s.live {
		if row == nil || !agrees(row, r) {
			continue
		}
		img := image(row)
		ids := s.byImage[img]
		for j, id := range ids {
			if id == i {
				s.byImage[img] = append(ids[:j], ids[j+1:]...)
				break
			}
		}
		s.live[i] = nil
		return row
	}
	return nil
}

func (s *keylessRows) apply(c *codec.Change) {
	switch c.Op {
	case "DELETE":
		s.take(c.Data)
	case "UPDATE":
		old := map[string]*string{}
		for col, v := range c.Data {
			old[col] = v
		}
		for col, v := range c.Old {
			old[col] = v
		}
		row := s.take(old)
		if row == nil {
			row = map[string]*string{}
		}
		next := map[string]*string{}
		for col, v := range row {
			next[col] = v
		}
		for col, v := range c.Data {
			next[col] = v
		}
		s.add(next)
	default:
		s.add(c.Data)
	}
}

func (s *keylessRows) step(st schemaStep) {
	if st.truncate {
		s.live, s.byImage = nil, map[string][]int{}
		return
	}
	// Filled rows have new images: index them again.
	s.byImage = map[string][]int{}
	for i, row := range s.live {
		if row != nil {
			st.fill(row)
			s.byImage[image(row)] = append(s.byImage[image(row)], i)
		}
	}
}

func (s *keylessRows) each(f func(map[string]*string)) {
	for _, row := range s.live {
		if row != nil {
			f(row)
		}
	}
}

func (s *keylessRows) rows() Rows {
	rows := Rows{}
	copies := map[string]int{}
	for _, row := range s.live {
		if row != nil {
			img := image(row)
			copies[img]++
			rows[model.ImageKey(row, copies[img])] = row
		}
	}
	return rows
}

// agrees says row has r's values in r's columns.
func agrees(row, r map[string]*string) bool {
	for col, v := range r {
		// A column the row lacks was added since it was written, without
		// a DEFAULT (step fills those with one): NULL in it, as a
		// consumer that applied the ADD COLUMN has it.
		w := row[col]
		if (v == nil) != (w == nil) || v != nil && *v != *w {
			return false
		}
	}
	return true
}
