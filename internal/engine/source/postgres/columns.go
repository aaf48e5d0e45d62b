package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A column's attribute number (pg_attribute.attnum) is what PostgreSQL
// knows it by: a rename keeps it, a drop ends it for good, an added
// column takes the next one. pgoutput's relation messages carry the
// columns' names in that order but not the numbers, so a column renamed
// looked like one dropped and another added: the change went downstream
// as DROP and ADD, and every older row read NULL in the "added" column
// there while it kept its value upstream. The reader keeps the numbers
// with the table's definition (TableState.Nums) and pairs a relation's
// columns with the ones it had by them.

// attribute is a column of a relation as the catalog has it now.
type attribute struct {
	name string
	live bool // not dropped, and sent by pgoutput (not a generated column)
	// xmin is the transaction that last wrote the column's catalog row
	// (added, renamed, dropped, its type changed).
	xmin uint32
}

// attributes are a relation's columns now, dropped ones included, by
// attribute number.
func (c *catalog) attributes(ctx context.Context, rel uint32) (map[int16]attribute, error) {
	of, err := c.attributesOf(ctx, []uint32{rel})
	return of[rel], err
}

// attributesOf are relations' columns now, as attributes has them, in one
// query (a relation gone has none).
func (c *catalog) attributesOf(ctx context.Context, rels []uint32) (map[uint32]map[int16]attribute, error) {
	version, err := c.serverVersion(ctx)
	if err != nil {
		return nil, err
	}
	generated := "false"
	if version >= 120000 {
		generated = "attgenerated <> ''"
	}
	oids := make([]int64, len(rels))
	for i, r := range rels {
		oids[i] = int64(r)
	}
	rows, err := c.conn.Query(ctx, `SELECT attrelid::int8, attnum, attname, NOT attisdropped AND NOT (`+generated+`), xmin::text::int8
		FROM pg_attribute WHERE attrelid = ANY($1::int8[]::oid[]) AND attnum > 0`, oids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[uint32]map[int16]attribute{}
	for rows.Next() {
		var (
			rel, xmin int64
			num       int16
			a         attribute
		)
		if err := rows.Scan(&rel, &num, &a.name, &a.live, &xmin); err != nil {
			return nil, err
		}
		a.xmin = uint32(xmin)
		if out[uint32(rel)] == nil {
			out[uint32(rel)] = map[int16]attribute{}
		}
		out[uint32(rel)][num] = a
	}
	return out, rows.Err()
}

// nums are the attribute numbers of def's columns, a relation's (nil
// when the catalog no longer agrees with def).
func (c *catalog) nums(ctx context.Context, rel uint32, def *source.TableDef) ([]int16, error) {
	attrs, err := c.attributes(ctx, rel)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(def.Columns))
	for i, col := range def.Columns {
		names[i] = col.Name
	}
	return numsByName(names, attrs), nil
}

// numsByName are the attribute numbers of columns names (in the order
// pgoutput sends them) as the catalog names them now; nil when the
// catalog does not agree with them (a column renamed or dropped since,
// or its numbers out of their order).
func numsByName(names []string, attrs map[int16]attribute) []int16 {
	byName := make(map[string]int16, len(attrs))
	for num, a := range attrs {
		if a.live {
			byName[a.name] = num
		}
	}
	out := make([]int16, len(names))
	for j, n := range names {
		num, ok := byName[n]
		if !ok || j > 0 && num <= out[j-1] {
			return nil
		}
		out[j] = num
	}
	return out
}

// known says nums are a definition's attribute numbers, all of them.
func known(nums []int16, n int) bool {
	if len(nums) != n {
		return false
	}
	for _, num := range nums {
		if num == 0 {
			return false
		}
	}
	return true
}

// matchColumns pairs a table's columns after a schema change in
// transaction xid (to, in
// attribute order, as the relation message has them) with the ones
// before (from, with their numbers fromNums where known): pair[j] is
// the index in from of to's column j, -1 for a column added. nums are
// to's numbers (0 where not known). ok is false when the change cannot
// be told apart from another (the catalog, which is read now, has moved
// on from this point of the stream in a way that hides it): the caller
// holds the table rather than guess, since a rename taken for a drop and
// an add loses the older rows' values downstream.
//
// The catalog's numbers for to's names are taken when they agree with
// everything known: increasing, the same as before for a column kept by
// name, and every column of from still there now among them (a column
// there now was there then, so it is one of to's). Else the change is
// read from the order alone: columns keep their order through renames
// and drops and are added at the end, so between two columns kept by
// name, to's columns are from's there renamed; at the end, from's that
// are still there now (by their numbers) come first, renamed, and the
// rest of to's were added.
func matchColumns(from []string, fromNums []int16, to []string, attrs map[int16]attribute, xid uint32) (pair []int, nums []int16, ok bool) {
	fromKnown := known(fromNums, len(from))
	index := make(map[string]int, len(from))
	for i, n := range from {
		index[n] = i
	}
	pair = make([]int, len(to))
	if toNums := numsByName(to, attrs); toNums != nil && fromKnown && agrees(from, fromNums, to, toNums, attrs, xid) {
		at := make(map[int16]int, len(from))
		for i, num := range fromNums {
			at[num] = i
		}
		for j, num := range toNums {
			if i, was := at[num]; was {
				pair[j] = i
			} else {
				pair[j] = -1
			}
		}
		return pair, toNums, true
	}
	liveNow := func(i int) bool {
		if !fromKnown {
			return false
		}
		a, ok := attrs[fromNums[i]]
		return ok && a.live
	}
	for j := range pair {
		pair[j] = -1
	}
	// The columns kept by name, in order in both.
	type kept struct{ i, j int }
	var ks []kept
	for j, n := range to {
		if i, was := index[n]; was {
			if len(ks) > 0 && i <= ks[len(ks)-1].i {
				return nil, nil, false
			}
			if fromKnown && !liveNow(i) && newerNamed(n, fromNums, attrs) {
				// Dropped since, and a column of its name there now that
				// was not before: the stream's column may be it, added
				// then (dropped and added again in one go), or the old
				// one, the other added later.
				return nil, nil, false
			}
			ks = append(ks, kept{i, j})
			pair[j] = i
		}
	}
	ks = append(ks, kept{len(from), len(to)}) // the end
	prevI, prevJ := -1, -1
	for n, k := range ks {
		fromGap, toGap := k.i-prevI-1, k.j-prevJ-1
		tail := n == len(ks)-1
		switch {
		case toGap == 0:
			// Dropped, all of them.
		case !tail && toGap == fromGap:
			for d := 0; d < toGap; d++ {
				pair[prevJ+1+d] = prevI + 1 + d
			}
		case !fromKnown && tail:
			// Numbers not kept yet (a checkpoint written before they
			// were): taken as dropped and added, as they always were.
		default:
			var still []int
			for i := prevI + 1; i < k.i; i++ {
				if !fromKnown {
					return nil, nil, false
				}
				if liveNow(i) {
					still = append(still, i)
				}
			}
			if len(still) > toGap || !tail && len(still) != toGap {
				return nil, nil, false
			}
			for d, i := range still {
				pair[prevJ+1+d] = i
			}
		}
		prevI, prevJ = k.i, k.j
	}
	nums = make([]int16, len(to))
	byName := numsByName(to, attrs)
	for j := range to {
		switch {
		case pair[j] >= 0 && fromKnown:
			nums[j] = fromNums[pair[j]]
		case byName != nil:
			nums[j] = byName[j]
		}
	}
	if !increasing(nums) {
		nums = nil
	}
	return pair, nums, true
}

// agrees says the catalog's numbers toNums for to's columns agree with
// what is known of from's: every column of from there now is one of
// to's (a column there now was there then), and a name kept whose
// number changed either now names another of from's columns (renamed to
// it: a swap, or a column dropped and another renamed to its name) or
// names a column added since that could not have been from's under the
// order of to's numbers. Otherwise the name may have been dropped and
// added again after this point of the stream, while the stream's column
// of that name is still from's. A name that now names another of from's
// columns is taken only when this transaction (xid) wrote that column's
// catalog row: else the rename may be a later one, and the stream's
// column of the name still the one it was.
func agrees(from []string, fromNums []int16, to []string, toNums []int16, attrs map[int16]attribute, xid uint32) bool {
	in := make(map[int16]bool, len(toNums))
	for _, num := range toNums {
		in[num] = true
	}
	for j, num := range toNums {
		for i, n := range from {
			if n != to[j] || fromNums[i] == num {
				continue
			}
			if slices.Contains(fromNums, num) {
				if attrs[num].xmin != xid {
					return false
				}
				continue
			}
			if (j == 0 || toNums[j-1] < fromNums[i]) && (j == len(toNums)-1 || fromNums[i] < toNums[j+1]) && !in[fromNums[i]] {
				return false // it could be from's still
			}
		}
	}
	for _, num := range fromNums {
		if a, ok := attrs[num]; ok && a.live && !in[num] {
			return false
		}
	}
	return true
}

// newerNamed says the catalog has a column named name now that none of
// from's numbers is.
func newerNamed(name string, fromNums []int16, attrs map[int16]attribute) bool {
	for num, a := range attrs {
		if a.live && a.name == name && !slices.Contains(fromNums, num) {
			return true
		}
	}
	return false
}

// increasing says the known numbers of nums increase.
func increasing(nums []int16) bool {
	var last int16
	for _, n := range nums {
		if n == 0 {
			continue
		}
		if n <= last {
			return false
		}
		last = n
	}
	return true
}

// renames orders the renames of a change (old and new names, after its
// drops) so that each one's new name is free when it runs: a chain
// (b to c, c to d) renames c first, and a cycle (a and b swapped) goes
// through a name of its own.
func renames(pairs [][2]string, taken func(string) bool) [][2]string {
	pending := append([][2]string(nil), pairs...)
	var out [][2]string
	for len(pending) > 0 {
		progressed := false
		for k := 0; k < len(pending); k++ {
			blocked := false
			for _, p := range pending {
				if p[0] == pending[k][1] {
					blocked = true
					break
				}
			}
			if !blocked {
				out = append(out, pending[k])
				pending = append(pending[:k], pending[k+1:]...)
				k--
				progressed = true
			}
		}
		if !progressed {
			// A cycle: its first column steps aside, under a name that
			// fits PostgreSQL's 63 bytes (it would cut a longer one, and
			// the name checked free would not be the one taken).
			tmp := stepAside(pending[0][0], "")
			for n := 2; taken(tmp); n++ {
				tmp = stepAside(pending[0][0], strconv.Itoa(n))
			}
			out = append(out, [2]string{pending[0][0], tmp})
			pending[0][0] = tmp
		}
	}
	return out
}

// stepAside is the name a column of a cycle of renames takes on the way:
// its own with a suffix, cut to 63 bytes on a character's boundary.
func stepAside(name, n string) string {
	suffix := "_cdcctl_renaming" + n
	for len(name)+len(suffix) > 63 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name + suffix
}

// renameStatements are the statements renaming a table's columns.
func renameStatements(table string, rs [][2]string) []string {
	out := make([]string, len(rs))
	for k, r := range rs {
		out[k] = fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", quoteQualified(table), quoteIdent(r[0]), quoteIdent(r[1]))
	}
	return out
}

// joinStatements writes statements as one, as a schema change event
// carries them.
func joinStatements(stmts []string) string { return strings.Join(stmts, "; ") }

// pairColumns pairs a relation message's columns with the table's
// before (cur, numbered curNums): see matchColumns. The same names in
// the same order are the same columns, without asking the catalog
// (byNames), unless the numbers are not kept yet (then they are read):
// the catalog is asked once for all of a transaction's tables paired so
// (recheckColumns), whether a column was dropped and added again under
// its name. pair is nil when the change cannot be told apart.
func (s *Stream) pairColumns(ctx context.Context, rel uint32, cur *source.TableDef, curNums []int16, cols []*pglogrepl.RelationMessageColumn) (pair []int, nums []int16, byNames bool, err error) {
	to := make([]string, len(cols))
	for j, c := range cols {
		to[j] = c.Name
	}
	from := make([]string, len(cur.Columns))
	for i, c := range cur.Columns {
		from[i] = c.Name
	}
	curKnown := known(curNums, len(from))
	if slices.Equal(from, to) {
		pair = make([]int, len(to))
		for j := range pair {
			pair[j] = j
		}
		if curKnown {
			return pair, curNums, true, nil
		}
	}
	attrs, err := s.cat.attributes(ctx, rel)
	if err != nil {
		return nil, nil, false, err
	}
	if pair != nil {
		return pair, numsByName(to, attrs), false, nil
	}
	pair, nums, ok := matchColumns(from, curNums, to, attrs, s.xid)
	if !ok {
		return nil, nil, false, nil
	}
	return pair, nums, false, nil
}

// keyGone says the catalog's primary key of a table replicated by its
// whole rows is no longer def's key (dropped, or replaced by one of
// other columns): compared by the columns' numbers where they are known
// (a key column renamed since is the same column), else by name.
//
// A catalog that cannot be read is an error, not "the same key": taken
// for the same, a dropped key's rows would collapse downstream.
func (s *Stream) keyGone(ctx context.Context, rel uint32, table string, def *source.TableDef, nums []int16) (bool, error) {
	if known(nums, len(def.Columns)) {
		var key []int16
		err := s.cat.conn.QueryRow(ctx, `SELECT COALESCE((SELECT (string_to_array(indkey::text, ' ')::int2[])[1:indnkeyatts] FROM pg_index WHERE indrelid = $1 AND indisprimary), '{}')`, rel).Scan(&key)
		if err != nil {
			return false, err
		}
		var had []int16
		for j, c := range def.Columns {
			if c.KeyPos > 0 {
				had = append(had, nums[j])
			}
		}
		return len(key) != len(had) || slices.ContainsFunc(had, func(n int16) bool { return !slices.Contains(key, n) }), nil
	}
	now, err := s.cat.tableDef(ctx, table)
	if err != nil {
		return false, err
	}
	return len(now.Columns) > 0 && !sameNames(now.KeyNames(), def.KeyNames()), nil
}

// columnsUnclearHold says why a table is held when its columns changed
// in a way the reader cannot tell apart: renamed, or dropped and added.
func columnsUnclearHold(cf, table string) string {
	return fmt.Sprintf("its columns were renamed, or dropped and others added, in a way the changefeed cannot tell apart at this point of the WAL (the catalog it asks has changed again since), so its changes from here are held rather than risk writing a renamed column's values as a new column's NULLs: copy the table again with 'cdcctl changefeed pause %s', 'cdcctl changefeed update %s --copy-table %s' (the sink truncates it, then its rows are copied), 'cdcctl changefeed resume %s'",
		cf, cf, table, cf)
}
