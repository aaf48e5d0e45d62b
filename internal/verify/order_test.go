package verify

import (
	"fmt"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A writer's changes of a key out of commit order are counted as a
// consumer applying them in order meets them, not hidden by the
// rebuild's own sort: a change written after a newer one, and a key
// that ends on an older change; a replay of what was written, from any
// point to the newest, is in order.
func TestChangesOfAKeyOutOfCommitOrderAreCounted(t *testing.T) {
	change := func(key string, ts model.Ts) codec.Change {
		id, v := key, fmt.Sprint(ts)
		return codec.Change{Database: "s", Table: "t", Op: "UPDATE", PkNames: []string{"id"}, Data: map[string]*string{"id": &id, "v": &v}, CommitTs: ts}
	}
	stream := func(changes ...codec.Change) []codec.ChangeStream {
		return []codec.ChangeStream{{Dispatcher: "d1", Database: "s", Table: "t", Changes: changes}}
	}
	// partition is a Kafka partition's changes as its reader gives them:
	// a stream, cut where the position goes back.
	partition := func(changes ...codec.Change) []codec.ChangeStream {
		var out []codec.ChangeStream
		for i, c := range changes {
			if i == 0 || c.CommitTs < changes[i-1].CommitTs {
				out = append(out, codec.ChangeStream{Dispatcher: fmt.Sprintf("k0-%d", len(out)), Reader: "p0", Database: "s", Table: "t"})
			}
			out[len(out)-1].Changes = append(out[len(out)-1].Changes, c)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []codec.ChangeStream
		want uint64
	}{
		{"in order", stream(change("1", 1), change("2", 2), change("1", 3)), 0},
		{"replayed to the newest", stream(change("1", 1), change("1", 2), change("1", 3), change("1", 2), change("1", 3)), 0},
		{"swapped in the middle", stream(change("1", 1), change("1", 3), change("1", 2), change("1", 4)), 1},
		{"swapped at the end", stream(change("1", 1), change("1", 3), change("1", 2)), 2},
		{"a stale copy last", stream(change("1", 1), change("1", 2), change("1", 3), change("1", 1)), 1},
		{"other keys in between", stream(change("1", 2), change("2", 1), change("1", 3), change("2", 4)), 0},
		{"beyond the checked point", stream(change("1", 1), change("1", 9), change("1", 2)), 0},
		{"another table's", []codec.ChangeStream{{Dispatcher: "d1", Database: "s", Table: "u", Changes: []codec.Change{change("1", 3), change("1", 1)}}}, 0},
		// A Kafka partition's streams, cut where positions go back, read
		// one after another.
		{"a partition's replay from a checkpoint", partition(change("1", 1), change("1", 2), change("1", 3), change("1", 2), change("1", 3)), 0},
		{"a late copy last in its partition", partition(change("1", 1), change("1", 2), change("1", 3), change("1", 2)), 1},
		{"a change first seen after a newer one in its partition", partition(change("1", 1), change("1", 3), change("1", 2), change("1", 3)), 1},
		{"two partitions of the table", append(partition(change("1", 1), change("1", 3)), codec.ChangeStream{Dispatcher: "k1", Reader: "p1", Database: "s", Table: "t", Changes: []codec.Change{change("2", 2), change("2", 4)}}), 0},
	} {
		if n, ex := misordered(tc.in, "s.t", 5); n != tc.want || (n > 0) != (len(ex) > 0) {
			t.Errorf("%s: %d out of order (%q), want %d", tc.name, n, ex, tc.want)
		}
	}
}

// A change in the files of another table version than the one in force
// at its position is misplaced: a consumer applying a storage sink's
// version directories in order (a TRUNCATE between them, say) would
// lose it or read it under the wrong schema, while the rebuild, applying
// every change by its position, rebuilt the same table.
func TestAChangeInAnotherTableVersionsFilesIsMisplaced(t *testing.T) {
	ms := model.TsFromMillis
	change := func(ts model.Ts) codec.Change {
		id, v := "1", fmt.Sprint(ts)
		return codec.Change{Database: "s", Table: "t", Op: "UPDATE", PkNames: []string{"id"}, Data: map[string]*string{"id": &id, "v": &v}, CommitTs: ts}
	}
	v1, v2, v3 := uint64(ms(1000)), uint64(ms(2000)), uint64(ms(3000))
	schemas := []codec.SchemaChange{{Database: "s", Table: "t", At: v1}, {Database: "s", Table: "t", At: v2}, {Database: "s", Table: "t", At: v3}}
	at := func(version uint64, changes ...codec.Change) codec.ChangeStream {
		return codec.ChangeStream{Dispatcher: "d1", Database: "s", Table: "t", Version: version, Changes: changes}
	}
	for _, tc := range []struct {
		name string
		in   []codec.ChangeStream
		want uint64
	}{
		{"each in its version", []codec.ChangeStream{at(v1, change(ms(1001)), change(ms(1999))), at(v2, change(ms(2000)), change(ms(2500))), at(v3, change(ms(3500)))}, 0},
		{"a change of the second version in the first's files", []codec.ChangeStream{at(v1, change(ms(1001)), change(ms(2100))), at(v2, change(ms(2500)))}, 1},
		{"a change of the first version in the second's files", []codec.ChangeStream{at(v1, change(ms(1001))), at(v2, change(ms(1500)), change(ms(2500)))}, 1},
		{"past the checked point", []codec.ChangeStream{at(v1, change(ms(1001)), change(ms(5000)))}, 0},
		{"a Kafka topic's (no version)", []codec.ChangeStream{at(0, change(ms(1001)), change(ms(5000)))}, 0},
		// A row of the transaction whose ALTER began the second version,
		// written before it: its position is the transaction's, past the
		// ALTER's, in the same millisecond.
		{"a row before the ALTER of its transaction", []codec.ChangeStream{at(v1, change(ms(1001)), change(ms(2000)+64))}, 0},
	} {
		if n, ex := misversioned(tc.in, schemas, "s.t", ms(4000)); n != tc.want || (n > 0) != (len(ex) > 0) {
			t.Errorf("%s: %d misplaced (%q), want %d", tc.name, n, ex, tc.want)
		}
	}
}
