package verify

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// misordered counts what a consumer applying one writer's changes of a
// table in the order they were written would meet out of commit order,
// up to upTo: a change of a key written after a newer change of that key
// (its first copy: a replay writes again what was written before), and a
// key whose last change is not its newest (it would end stale). The
// rebuild applies every change by its position, so without this a sink
// that wrote a key's changes swapped rebuilt the same table. A Kafka
// partition's streams (its reader cuts them where positions go back) are
// judged as one, in the order they were read: a copy of a change that
// lands after newer ones and stays last (a produce request the broker
// appended late) leaves its key stale though each stream is in order.
func misordered(streams []codec.ChangeStream, table string, upTo model.Ts) (uint64, []string) {
	type change struct {
		ts       model.Ts
		key, img string
	}
	type keyState struct{ newest, last model.Ts }
	var n uint64
	var examples []string
	bad := func(format string, a ...any) {
		n++
		if len(examples) < maxExamples {
			examples = append(examples, fmt.Sprintf(format, a...))
		}
	}
	// The orders a consumer reads: a stream alone, or a Reader's streams
	// one after another.
	var orders [][]*codec.ChangeStream
	byReader := map[string]int{}
	for i := range streams {
		st := &streams[i]
		if model.TableName(st.Database, st.Table) != table {
			continue
		}
		if st.Reader == "" {
			orders = append(orders, []*codec.ChangeStream{st})
			continue
		}
		j, ok := byReader[st.Reader]
		if !ok {
			j = len(orders)
			byReader[st.Reader] = j
			orders = append(orders, nil)
		}
		orders[j] = append(orders[j], st)
	}
	for _, order := range orders {
		name := order[0].Dispatcher
		if r := order[0].Reader; r != "" {
			name = r
		}
		keys := map[string]*keyState{}
		seen := map[change]bool{}
		for _, st := range order {
			for i := range st.Changes {
				c := &st.Changes[i]
				if c.CommitTs > upTo {
					continue
				}
				k := c.Key()
				img, _ := json.Marshal(c.Data)
				id := change{c.CommitTs, k, c.Op + string(img)}
				ks := keys[k]
				if ks == nil {
					ks = &keyState{}
					keys[k] = ks
				}
				if !seen[id] {
					seen[id] = true
					if c.CommitTs < ks.newest {
						bad("%s: a change of key %q at %s written after one at %s (%s)", table, k, c.CommitTs, ks.newest, name)
					}
				}
				ks.newest, ks.last = max(ks.newest, c.CommitTs), c.CommitTs
			}
		}
		for k, ks := range keys {
			if ks.last < ks.newest {
				bad("%s: key %q's last change is at %s, after one at %s (%s): read in order, it ends stale", table, k, ks.last, ks.newest, name)
			}
		}
	}
	return n, examples
}

// misversioned counts the changes a storage sink wrote into the directory
// of another table version than the one in force at their position, up
// to upTo: before the version began (under a schema newer than theirs),
// or after the next one began (a consumer applying the directories in
// order, a TRUNCATE or a DROP in between, would lose or misread them).
// The rebuild applies every change by its position, whatever directory
// holds it. A Kafka topic has no directories (its streams carry no
// version).
func misversioned(streams []codec.ChangeStream, schemas []codec.SchemaChange, table string, upTo model.Ts) (uint64, []string) {
	var versions []uint64
	for _, sc := range schemas {
		if model.TableName(sc.Database, sc.Table) == table {
			versions = append(versions, sc.At)
		}
	}
	for _, st := range streams {
		if model.TableName(st.Database, st.Table) == table && st.Version != 0 {
			versions = append(versions, st.Version)
		}
	}
	slices.Sort(versions)
	versions = slices.Compact(versions)
	var n uint64
	var examples []string
	for _, st := range streams {
		if model.TableName(st.Database, st.Table) != table || st.Version == 0 {
			continue
		}
		var next uint64 // the version after this one, 0 for none
		if i, found := slices.BinarySearch(versions, st.Version); found && i+1 < len(versions) {
			next = versions[i+1]
		}
		for i := range st.Changes {
			c := &st.Changes[i]
			at := uint64(c.CommitTs)
			// A row after the next version began is misplaced, but for
			// one of the transaction that began it, written before its
			// schema change (PostgreSQL places a transaction's schema
			// changes before its rows: the same millisecond).
			inTxn := next != 0 && model.Ts(at).Millis() == model.Ts(next).Millis()
			if c.CommitTs > upTo || at >= st.Version && (next == 0 || at <= next || inTxn) {
				continue
			}
			n++
			if len(examples) < maxExamples {
				examples = append(examples, fmt.Sprintf("%s: a change of key %q at %s is in table version %d's files (%s), the next version beginning at %d", table, c.Key(), c.CommitTs, st.Version, st.Dispatcher, next))
			}
		}
	}
	return n, examples
}
