package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	sinks "github.com/cdcctl/cdcctl/internal/engine/sink/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Row images by primary key (the key columns' text joined by commas):
// column name to text, nil for SQL NULL.
type Rows = map[string]map[string]*string

// Upstream reads a database's tables.
type Upstream interface {
	// Snapshot reads tables ("schema.table") whole at one consistent
	// point, and returns the upstream's clock at that point: every
	// transaction it shows committed before then.
	Snapshot(ctx context.Context, tables []string) (time.Time, map[string]Rows, error)
}

// Positioned is an Upstream whose reads come with the changefeed's own
// position of their point (a source whose positions are its reader's,
// not a clock's: mysql).
type Positioned interface {
	SnapshotAt(ctx context.Context, tables []string) (model.Ts, map[string]Rows, error)
}

// read reads the upstream and the position to compare the sink at.
func read(ctx context.Context, up Upstream, tables []string) (model.Ts, time.Time, map[string]Rows, error) {
	if p, ok := up.(Positioned); ok {
		ts, rows, err := p.SnapshotAt(ctx, tables)
		return ts, ts.Time(), rows, err
	}
	at, rows, err := up.Snapshot(ctx, tables)
	return model.TsFromMicros(at.UnixMicro()), at, rows, err
}

// WaitFunc waits until the changefeed's checkpoint reaches a position and
// returns the checkpoint.
type WaitFunc func(ctx context.Context, ts model.Ts) (model.Ts, error)

// rounds is how often a row that differs is read again: a row written
// while the upstream was read can differ once; a row that is lost
// differs every time.
const rounds = 3

// TableReport is one table's comparison of the sink with the upstream.
type TableReport = model.TableVerifyReport

// Database compares each table rebuilt from a sink (a storage sink's
// canal-json or CSV files, or a Kafka topic's canal-json messages) with the
// upstream's, at the same position: it reads the upstream
// at a consistent point, waits until the changefeed's checkpoint has
// passed that point, and rebuilds the sink's rows up to it. Rows that
// differ are compared again at a later point, up to three rounds, so rows
// written during the check are never reported lost; a row that differs
// every round is reported (missing, extra or different).
func Database(ctx context.Context, sinkURI string, up Upstream, tables []string, wait WaitFunc) (Report, error) {
	sink, err := sinks.ReadBack(ctx, sinkURI)
	if err != nil {
		return Report{}, err
	}
	defer sink.Close()
	var suspects map[string]map[string]bool // table -> keys that differed
	var rep Report
	var last model.Ts
	for round := 0; round < rounds; round++ {
		upTo, at, upstream, err := read(ctx, up, tables)
		if err != nil {
			return Report{}, fmt.Errorf("read the upstream: %w", err)
		}
		if round > 0 && upTo <= last {
			// The upstream's point did not move: the same sink and
			// upstream at the same point give the same answer again.
			return rep, nil
		}
		last = upTo
		if _, err := wait(ctx, upTo); err != nil {
			return Report{}, fmt.Errorf("wait for the checkpoint to pass the upstream's read at %s: %w", at.Format(time.RFC3339Nano), err)
		}
		streams, schemas, err := sink.Changes(ctx)
		if err != nil {
			return Report{}, fmt.Errorf("read the sink: %w", err)
		}
		rep = Report{Version: 1, Tables: len(tables), CheckedUpToTs: uint64(upTo)}
		next := map[string]map[string]bool{}
		for _, table := range tables {
			if why := unrebuildable(streams, table); why != "" {
				rep.NotVerified = append(rep.NotVerified, table+": "+why)
				continue
			}
			filled, err := backfills(ctx, up, schemas, table)
			if err != nil {
				return Report{}, err
			}
			set, events, dups := rebuildSet(streams, stepsOf(schemas, table, filled), table, upTo)
			rep.Events += events
			rep.Duplicates += dups
			misplaced, examples := misordered(streams, table, upTo)
			rep.OutOfOrder += misplaced
			elsewhere, more := misversioned(streams, schemas, table, upTo)
			rep.Misplaced += elsewhere
			for _, ex := range append(examples, more...) {
				if len(rep.Examples) < maxExamples {
					rep.Examples = append(rep.Examples, ex)
				}
			}
			want, built := upstream[table], Rows{}
			if set != nil {
				// The upstream's rows under the key the sink holds them by
				// last: a table's key may have changed under the
				// changefeed (rowsets.go).
				want, built = underKey(want, set.key()), set.rows()
			}
			tr, bad := compare(table, want, built, suspects[table], suspects != nil, &rep)
			rep.Keys += tr.UpstreamRows
			rep.Expected += uint64(tr.UpstreamRows)
			rep.Lost += uint64(tr.Missing)
			rep.Unknown += uint64(tr.Extra)
			rep.Corrupt += uint64(tr.Different)
			rep.TableReports = append(rep.TableReports, tr)
			if len(bad) > 0 {
				next[table] = bad
			}
		}
		rep.OK = rep.Lost == 0 && rep.Unknown == 0 && rep.Corrupt == 0 && rep.OutOfOrder == 0 && rep.Misplaced == 0
		if err := checkTransactions(ctx, sink, streams, upTo, &rep); err != nil {
			return Report{}, err
		}
		if rep.OK {
			return rep, nil
		}
		suspects = next
	}
	return rep, nil
}

// checkTransactions checks a sink's transaction boundaries, if it writes
// them, up to upTo: rep.Transactions, and rep.OK false on a problem.
// total_order may have gaps (a TRUNCATE in a transaction erases the rows
// it wrote before it).
func checkTransactions(ctx context.Context, sink codec.ReadBack, streams []codec.ChangeStream, upTo model.Ts, rep *Report) error {
	tx := NewTransactions()
	ok, err := sink.Transactions(ctx, tx.AddRecordLine)
	if err != nil {
		return fmt.Errorf("read the sink's transaction records: %w", err)
	}
	if !ok {
		return nil
	}
	tx.AddChanges(streams)
	rep.Transactions = &model.TransactionsVerifyReport{Checked: tx.Judged(0, upTo), Duplicates: tx.Duplicates, Problems: tx.Check(false, 0, upTo)}
	if len(rep.Transactions.Problems) > 0 {
		rep.OK = false
	}
	return nil
}

// Rebuild applies a table's changes from every stream, in commit order
// (a key's changes keep their order: within a stream by file, across
// streams by position), up to a position. A replayed change applies
// again to the same effect. It returns the rows and how many changes it
// applied.
func Rebuild(streams []codec.ChangeStream, table string, upTo model.Ts) (Rows, uint64) {
	rows, n, _ := rebuild(streams, nil, table, upTo)
	return rows, n
}

// rebuild is Rebuild that also counts duplicates: a change that more
// than one stream holds (the same position, key, operation and row), as a
// replay after a crash writes.
func rebuild(streams []codec.ChangeStream, steps []schemaStep, table string, upTo model.Ts) (Rows, uint64, uint64) {
	set, n, dups := rebuildSet(streams, steps, table, upTo)
	if set == nil {
		return Rows{}, n, dups
	}
	return set.rows(), n, dups
}

// rebuildSet is rebuild's set of rows (nil for a table without changes),
// which also says under which key the sink holds them last.
func rebuildSet(streams []codec.ChangeStream, steps []schemaStep, table string, upTo model.Ts) (rowSet, uint64, uint64) {
	type change struct {
		ts       model.Ts
		key, img string
	}
	seen := map[change]string{} // -> the stream that held it first
	var dups uint64
	var all []codec.Change
	for _, st := range streams {
		if model.TableName(st.Database, st.Table) != table {
			continue
		}
		for i := range st.Changes {
			c := &st.Changes[i]
			if c.CommitTs > upTo {
				continue
			}
			img, _ := json.Marshal(c.Data)
			k := change{c.CommitTs, c.Key(), c.Op + string(img)}
			if first, ok := seen[k]; ok && first != st.Dispatcher {
				dups++
			} else if !ok {
				seen[k] = st.Dispatcher
			}
		}
		all = append(all, st.Changes...)
	}
	if len(all) == 0 {
		return nil, 0, dups
	}
	for _, c := range all {
		if len(c.PkNames) == 0 {
			// Without a key (for a while, at least), a replay is one more
			// equal row.
			all = onceEach(streams, table, upTo)
			break
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].CommitTs < all[j].CommitTs })
	set := newRowSet(all[0].PkNames)
	cut := &stepper{steps: steps, upTo: upTo, step: func(st schemaStep) {
		set.step(st) // a renamed key column first
		if st.keyKnown {
			set = rekey(set, st.key)
		}
	}}
	n := cut.replay(all, func(c *codec.Change) {
		set = rekey(set, c.PkNames)
		set.apply(c)
	})
	return set, n, dups
}

// unrebuildable says why a table cannot be rebuilt from a sink, "" when
// it can: a table without a key is matched row by row, and an update's
// row is found by its old values, which CSV does not carry.
func unrebuildable(streams []codec.ChangeStream, table string) string {
	for _, st := range streams {
		if model.TableName(st.Database, st.Table) != table {
			continue
		}
		for _, c := range st.Changes {
			if c.Op == "UPDATE" && c.NoOld && len(c.PkNames) == 0 {
				return "not verified: it has no primary key, and the sink's CSV carries no old values to find the row an update changed (canal-json does)"
			}
		}
	}
	return ""
}

// compare counts the rows that differ between upstream (want) and sink
// (got); after the first round only the suspects are judged. It returns
// the keys that differ.
func compare(table string, want, got Rows, suspects map[string]bool, only bool, rep *Report) (TableReport, map[string]bool) {
	tr := TableReport{Table: table, UpstreamRows: len(want), SinkRows: len(got)}
	bad := map[string]bool{}
	judged := func(k string) bool { return !only || suspects[k] }
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !judged(k) {
			continue
		}
		g, ok := got[k]
		if !ok {
			tr.Missing++
			bad[k] = true
			addExample(rep, fmt.Sprintf("%s: row %s is upstream, not in the sink", table, k))
			continue
		}
		if col, diff := firstDifference(want[k], g); diff {
			tr.Different++
			bad[k] = true
			addExample(rep, fmt.Sprintf("%s: row %s differs in column %s", table, k, col))
		}
	}
	extra := make([]string, 0)
	for k := range got {
		if _, ok := want[k]; !ok && judged(k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		tr.Extra++
		bad[k] = true
		addExample(rep, fmt.Sprintf("%s: row %s is in the sink, not upstream", table, k))
	}
	return tr, bad
}

func firstDifference(want, got map[string]*string) (string, bool) {
	cols := make([]string, 0, len(want))
	for c := range want {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	for _, c := range cols {
		w, g := want[c], got[c]
		if (w == nil) != (g == nil) || (w != nil && *w != *g) {
			return c, true
		}
	}
	return "", false
}

func addExample(rep *Report, s string) {
	if len(rep.Examples) < maxExamples {
		rep.Examples = append(rep.Examples, s)
	}
}

// onceEach is a table's changes with the replays left out. Applying a
// change again is harmless for a keyed table (the row is set again) but
// not for a table without a key, where a replayed insert is one more
// equal row. A replay after a crash writes a transaction's changes again
// from another dispatcher: the same position, operation and rows. So
// each such change is taken as many times as the one stream holding it
// most often holds it.
func onceEach(streams []codec.ChangeStream, table string, upTo model.Ts) []codec.Change {
	taken := map[string]int{}
	var out []codec.Change
	for _, st := range streams {
		if model.TableName(st.Database, st.Table) != table {
			continue
		}
		here := map[string]int{}
		for _, c := range st.Changes {
			if c.CommitTs > upTo {
				continue
			}
			data, _ := json.Marshal(c.Data)
			old, _ := json.Marshal(c.Old)
			id := fmt.Sprintf("%d %s %s %s", c.CommitTs, c.Op, data, old)
			here[id]++
			if here[id] > taken[id] {
				taken[id] = here[id]
				out = append(out, c)
			}
		}
	}
	return out
}

// Inserts lists every insert of a table's keys a sink holds: by key
// (the key columns' text joined by commas), each writer (dispatcher) and
// position. An initial snapshot copies each row that existed at most once
// in graceful runs: a key with two inserts of an existing row was copied
// twice.
func Inserts(ctx context.Context, sinkURI, table string) (map[string][]string, error) {
	sink, err := sinks.ReadBack(ctx, sinkURI)
	if err != nil {
		return nil, err
	}
	defer sink.Close()
	streams, _, err := sink.Changes(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the sink: %w", err)
	}
	schema, name := model.SplitTableName(table)
	out := map[string][]string{}
	for _, st := range streams {
		if st.Table != name || st.Database != "" && schema != "" && st.Database != schema {
			continue
		}
		for i := range st.Changes {
			if ch := &st.Changes[i]; ch.Op == "INSERT" {
				out[ch.Key()] = append(out[ch.Key()], fmt.Sprintf("%s at %v", st.Dispatcher, ch.CommitTs))
			}
		}
	}
	return out, nil
}
