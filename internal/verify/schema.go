package verify

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// schemaStep is what a rebuild does to a table's rows at a schema change:
// empty them (a TRUNCATE, a DROP), or, as the upstream did to the rows
// already there, rename columns and give them the value of a column added
// with a DEFAULT.
type schemaStep struct {
	at       model.Ts
	truncate bool
	renames  [][2]string       // old, new: in the statement's order
	defaults map[string]string // column -> value
	// key names the key columns of the table version the change made,
	// where the sink tells (keyKnown: its schema files do): none for a
	// table without a key (rowsets.go).
	key      []string
	keyKnown bool
}

// ident is a column name as either dialect writes it: "x", `x` or x.
const ident = "(\"(?:[^\"]|\"\")*\"|`(?:[^`]|``)*`|[A-Za-z0-9_$]+)"

// renameColumn finds a statement's column renames: RENAME COLUMN a TO b
// (both dialects) and MySQL's CHANGE [COLUMN] a b type.
var (
	renameColumn = regexp.MustCompile(`(?i)\bRENAME\s+COLUMN\s+` + ident + `\s+TO\s+` + ident)
	changeColumn = regexp.MustCompile(`(?i)\bCHANGE\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?` + ident + `\s+` + ident + `\s`)
)

// unquote reads an ident's name.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '`') {
		q := s[:1]
		return strings.ReplaceAll(s[1:len(s)-1], q+q, q)
	}
	return s
}

// renamesIn are the column renames of a statement, in order.
func renamesIn(query string) [][2]string {
	type found struct {
		at       int
		old, new string
	}
	var all []found
	for _, re := range []*regexp.Regexp{renameColumn, changeColumn} {
		for _, m := range re.FindAllStringSubmatchIndex(query, -1) {
			old, new := unquote(query[m[2]:m[3]]), unquote(query[m[4]:m[5]])
			if old != new {
				all = append(all, found{m[0], old, new})
			}
		}
	}
	slices.SortFunc(all, func(a, b found) int { return a.at - b.at })
	var out [][2]string
	for _, f := range all {
		out = append(out, [2]string{f.old, f.new})
	}
	return out
}

// addDefault finds the columns a reconstructed ALTER TABLE adds with a
// DEFAULT: ADD COLUMN "name" type DEFAULT 'value'.
var addDefault = regexp.MustCompile(`ADD COLUMN "((?:[^"]|"")*)" [^']*? DEFAULT '((?:[^']|'')*)'`)

// Backfiller is an Upstream whose statements verify does not read for
// their defaults (mysql's own ALTER TABLE; PostgreSQL's reconstructed
// ones it reads itself, addDefault): it gives, for each of a table's
// schema changes in order, the columns the change added and the value it
// gave the rows already there (nil where it added none it knows).
type Backfiller interface {
	Backfills(ctx context.Context, table string, queries []string) ([]map[string]string, error)
}

// tableChanges are a table's schema changes, in order.
func tableChanges(all []codec.SchemaChange, table string) []codec.SchemaChange {
	var out []codec.SchemaChange
	for _, sc := range all {
		if model.TableName(sc.Database, sc.Table) == table {
			out = append(out, sc)
		}
	}
	slices.SortStableFunc(out, func(a, b codec.SchemaChange) int { return cmp.Compare(a.At, b.At) })
	return out
}

// backfills asks up, when it is a Backfiller, for the values a table's
// schema changes gave its rows, by the changes' positions.
func backfills(ctx context.Context, up Upstream, all []codec.SchemaChange, table string) (map[uint64]map[string]string, error) {
	b, ok := up.(Backfiller)
	if !ok {
		return nil, nil
	}
	changes := tableChanges(all, table)
	if len(changes) == 0 {
		return nil, nil
	}
	queries := make([]string, len(changes))
	for i, sc := range changes {
		queries[i] = sc.Query
	}
	got, err := b.Backfills(ctx, table, queries)
	if err != nil {
		return nil, fmt.Errorf("read the defaults of the columns added to %s: %w", table, err)
	}
	out := map[uint64]map[string]string{}
	for i, d := range got {
		if len(d) > 0 && i < len(changes) {
			out[changes[i].At] = d
		}
	}
	return out, nil
}

// stepsOf is what a table's schema changes do to its rows, in order;
// filled are the values changes gave the rows already there, by their
// positions, that the upstream told (backfills).
func stepsOf(all []codec.SchemaChange, table string, filled map[uint64]map[string]string) []schemaStep {
	var out []schemaStep
	for _, sc := range tableChanges(all, table) {
		st := schemaStep{at: model.Ts(sc.At), key: sc.Key, keyKnown: sc.KeyKnown}
		if strings.HasPrefix(sc.Query, source.TruncatePrefix) || source.EndsTable(sc.Query) {
			// A table dropped or renamed away has no rows under its name;
			// one created again under it later starts empty too.
			st.truncate = true
		} else {
			st.renames = renamesIn(sc.Query)
			for _, m := range addDefault.FindAllStringSubmatch(sc.Query, -1) {
				if st.defaults == nil {
					st.defaults = map[string]string{}
				}
				st.defaults[strings.ReplaceAll(m[1], `""`, `"`)] = strings.ReplaceAll(m[2], "''", "'")
			}
			for col, v := range filled[sc.At] {
				if st.defaults == nil {
					st.defaults = map[string]string{}
				}
				st.defaults[col] = v
			}
			if st.defaults == nil && st.renames == nil && !st.keyKnown {
				continue
			}
		}
		out = append(out, st)
	}
	return out
}

// fill renames a row's columns and gives it the added columns' values it
// does not have.
func (s schemaStep) fill(row map[string]*string) {
	for _, r := range s.renames {
		if v, ok := row[r[0]]; ok {
			delete(row, r[0])
			row[r[1]] = v
		}
	}
	for col, v := range s.defaults {
		if _, ok := row[col]; !ok {
			v := v
			row[col] = &v
		}
	}
}

// stepper applies a table's schema steps as the changes pass them: a
// step's position is below every row of its transaction.
type stepper struct {
	steps []schemaStep
	upTo  model.Ts
	step  func(schemaStep)
}

// before applies every step before ts.
func (s *stepper) before(ts model.Ts) {
	for len(s.steps) > 0 && s.steps[0].at < ts && s.steps[0].at <= s.upTo {
		s.step(s.steps[0])
		s.steps = s.steps[1:]
	}
}

// replay applies the changes up to upTo in order (sorted by position),
// each after the schema steps before it, then the steps left up to upTo;
// it returns how many changes it applied.
func (s *stepper) replay(all []codec.Change, apply func(c *codec.Change)) uint64 {
	var n uint64
	for i := range all {
		c := &all[i]
		if c.CommitTs > s.upTo {
			break
		}
		s.before(c.CommitTs)
		apply(c)
		n++
	}
	s.before(s.upTo + 1)
	return n
}
