package verify

import (
	"regexp"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// schemaStep is what a rebuild does to a table's rows at a schema change:
// empty them (a TRUNCATE, a DROP), or give the rows already there the value of a
// column added with a DEFAULT, as the upstream did.
type schemaStep struct {
	at       model.Ts
	truncate bool
	defaults map[string]string // column -> value
}

// addDefault finds the columns a reconstructed ALTER TABLE adds with a
// DEFAULT: ADD COLUMN "name" type DEFAULT 'value'.
var addDefault = regexp.MustCompile(`ADD COLUMN "((?:[^"]|"")*)" [^']*? DEFAULT '((?:[^']|'')*)'`)

// stepsOf is what a table's schema changes do to its rows, in order.
func stepsOf(all []codec.SchemaChange, table string) []schemaStep {
	var out []schemaStep
	for _, sc := range all {
		if model.TableName(sc.Database, sc.Table) != table {
			continue
		}
		st := schemaStep{at: model.Ts(sc.At)}
		if strings.HasPrefix(sc.Query, source.TruncatePrefix) || source.EndsTable(sc.Query) {
			// A table dropped or renamed away has no rows under its name;
			// one created again under it later starts empty too.
			st.truncate = true
		} else {
			for _, m := range addDefault.FindAllStringSubmatch(sc.Query, -1) {
				if st.defaults == nil {
					st.defaults = map[string]string{}
				}
				st.defaults[strings.ReplaceAll(m[1], `""`, `"`)] = strings.ReplaceAll(m[2], "''", "'")
			}
			if st.defaults == nil {
				continue
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b schemaStep) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	return out
}

// fill gives a row the added columns' values it does not have.
func (s schemaStep) fill(row map[string]*string) {
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
