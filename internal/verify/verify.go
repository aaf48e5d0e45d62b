// Package verify proves that a sink holds what the source produced: for
// every key of every table, every version up to the changefeed's
// checkpoint, in per-key order. For a deterministic source (one that
// meets source.Expectation, like gen) the expected content is computed,
// not recorded.
//
// This file is the checker; readers of each sink's output feed it rows in
// the order the sink delivers them per key. It imports model and source's
// interfaces; it never imports the engine's control path or a concrete
// source.
package verify

import (
	"fmt"
	"net/url"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Row is one DML row as a sink delivered it.
type Row struct {
	Table    string
	Key      string
	Version  uint64
	CommitTs model.Ts
	// Value is the row's payload column, which the source never leaves
	// empty: an empty one (NULL, or the column missing) is corrupt.
	Value string
}

// Report is the outcome, also `cdcctl verify -o json` (the agent runs it
// for the API: the type lives in model, which both know).
type Report = model.VerifyReport

const maxExamples = 10

type keyState struct {
	maxSeen uint64
	counts  []uint8 // counts[v-1]: how often version v arrived (saturates)
	// last is the version of the key's last row at or before the
	// checkpoint, in the order the sink delivers them.
	last uint64
}

// Checker accumulates rows and reports.
type Checker struct {
	want   source.Expectation
	upTo   model.Ts
	keys   []keyState // by key ref
	tables map[string]bool
	report Report
	// twice names the first keys and versions read more than once: they
	// follow the report's other examples, which say more.
	twice []string
}

// NewChecker checks a sink against a deterministic source up to a
// checkpoint: every version committed at or before upTo must be present.
func NewChecker(want source.Expectation, upTo model.Ts) *Checker {
	c := &Checker{
		want: want, upTo: upTo, keys: make([]keyState, want.Keys()), tables: map[string]bool{},
		report: Report{Version: 1, Keys: want.Keys(), CheckedUpToTs: uint64(upTo)},
	}
	for ref := 0; ref < want.Keys(); ref++ {
		t, _ := want.KeyOf(ref)
		c.tables[t] = true
	}
	c.report.Tables = len(c.tables)
	return c
}

func (c *Checker) example(format string, args ...any) {
	if len(c.report.Examples) < maxExamples {
		c.report.Examples = append(c.report.Examples, fmt.Sprintf(format, args...))
	}
}

// Misplaced records a DDL ordering violation found by a sink reader.
func (c *Checker) Misplaced(example string) {
	c.report.Misplaced++
	c.example("%s", example)
}

// Observe takes the next row of a key in the order the sink delivers it.
func (c *Checker) Observe(r Row) {
	c.report.Events++
	ref, ok := c.want.KeyRef(r.Table, r.Key)
	if !ok || r.Version == 0 {
		c.report.Unknown++
		c.example("unknown row %s/%s version %d", r.Table, r.Key, r.Version)
		return
	}
	if want := c.want.VersionCommitTs(ref, r.Version); want != r.CommitTs {
		c.report.Corrupt++
		c.example("%s/%s version %d has commit ts %d, the source committed it at %d", r.Table, r.Key, r.Version, r.CommitTs, want)
		return
	}
	if r.Value != c.want.Payload(ref, r.Version) {
		c.report.Corrupt++
		c.example("%s/%s version %d has a payload the source did not write (%q)", r.Table, r.Key, r.Version, truncated(r.Value))
		return
	}
	st := &c.keys[ref]
	for uint64(len(st.counts)) < r.Version {
		st.counts = append(st.counts, 0)
	}
	n := &st.counts[r.Version-1]
	if *n == 0 && r.CommitTs > c.upTo {
		c.report.Beyond++ // a first copy: a later one is a duplicate
	}
	if *n > 0 {
		c.report.Duplicates++
		if len(c.twice) < maxExamples {
			c.twice = append(c.twice, fmt.Sprintf("written twice: %s/%s version %d", r.Table, r.Key, r.Version))
		}
	} else if r.Version < st.maxSeen {
		c.report.OutOfOrder++
		c.example("%s/%s version %d arrived after version %d", r.Table, r.Key, r.Version, st.maxSeen)
	}
	if *n < 255 {
		*n++
	}
	st.maxSeen = max(st.maxSeen, r.Version)
	if r.CommitTs <= c.upTo {
		st.last = r.Version
	}
}

// truncated is a value short enough for an example.
func truncated(v string) string {
	if len(v) > 40 {
		return v[:40] + "…"
	}
	return v
}

// Report counts what is missing and returns the outcome. OK means nothing
// lost, out of order, corrupt or unknown; duplicates are reported for the
// caller to judge (zero is expected of graceful operations).
func (c *Checker) Report() Report {
	rep := c.report
	for ref := range c.keys {
		want := c.want.Versions(ref, c.upTo)
		rep.Expected += want
		st := &c.keys[ref]
		newest := uint64(0) // the newest version delivered, of those checked
		for v := uint64(1); v <= want; v++ {
			if v > uint64(len(st.counts)) || st.counts[v-1] == 0 {
				rep.Lost++
				if len(rep.Examples) < maxExamples {
					table, key := c.want.KeyOf(ref)
					rep.Examples = append(rep.Examples, fmt.Sprintf("lost %s/%s version %d", table, key, v))
				}
			} else {
				newest = v
			}
		}
		if st.last < newest {
			// Its first copies came in order, but a copy of an older
			// version came after the newest (a writer that went on after
			// another took over): a consumer applying the rows in order
			// ends on a stale row. A replay after a crash writes every
			// version again from its checkpoint to the newest.
			rep.OutOfOrder++
			if len(rep.Examples) < maxExamples {
				table, key := c.want.KeyOf(ref)
				rep.Examples = append(rep.Examples, fmt.Sprintf("%s/%s: its last row is version %d, after version %d: read in order, the key ends stale", table, key, st.last, newest))
			}
		}
	}
	for _, ex := range c.twice {
		if len(rep.Examples) >= maxExamples {
			break
		}
		rep.Examples = append(rep.Examples, ex)
	}
	rep.OK = rep.Lost == 0 && rep.OutOfOrder == 0 && rep.Corrupt == 0 && rep.Unknown == 0 && rep.Misplaced == 0
	return rep
}

// JudgeDuplicates fails a report of a sink that promises to deliver
// exactly once (delivery=exactly-once) and holds anything twice: events
// of a generator, changes of a rebuilt table, transaction records.
// Elsewhere duplicates are reported, not judged: after a crash an
// at-least-once sink writes rows again by design.
func JudgeDuplicates(rep *Report, sinkURI string) {
	u, err := url.Parse(sinkURI)
	if err != nil || u.Query().Get("delivery") != "exactly-once" {
		return
	}
	if rep.Duplicates > 0 {
		rep.OK = false
		rep.Examples = append([]string{fmt.Sprintf("%d changes written twice, into a sink that delivers exactly once (delivery=exactly-once)", rep.Duplicates)}, rep.Examples...)
	}
	if t := rep.Transactions; t != nil && t.Duplicates > 0 {
		rep.OK = false
		t.Problems = append([]string{fmt.Sprintf("%d transaction records and rows written twice, into a sink that delivers exactly once (delivery=exactly-once)", t.Duplicates)}, t.Problems...)
	}
}
