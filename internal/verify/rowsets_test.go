package verify

import (
	"slices"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/model"
)

func keyChange(ts model.Ts, op string, pk []string, x, y, v string) codec.Change {
	return codec.Change{Database: "public", Table: "t", Op: op, PkNames: pk, CommitTs: ts,
		Data: map[string]*string{"x": str(x), "y": str(y), "v": str(v)}}
}

// A table whose key changes under the changefeed is rebuilt with its
// rows moved under the new key where the sink shows the change: at the
// schema change that names the new key (a storage sink's schema file),
// else at the first row written under it. No row stays behind under its
// old key beside its newer self; an update after the change finds the
// row that was written before it.
func TestARebuildFollowsAChangedKey(t *testing.T) {
	x, yx := []string{"x"}, []string{"y", "x"}
	for _, c := range []struct {
		name    string
		changes []codec.Change
		steps   []schemaStep
		key     []string
		rows    map[string]string // x -> v
		keys    []string          // the rows' keys under a key of two columns
	}{
		{"a key of other columns, named by the schema change", []codec.Change{
			keyChange(10, "INSERT", x, "1", "5", "a"), keyChange(10, "INSERT", x, "2", "6", "b"),
			keyChange(30, "UPDATE", yx, "1", "5", "c"),
		}, []schemaStep{{at: 20, key: yx, keyKnown: true}}, yx, map[string]string{"1": "c", "2": "b"}, []string{"5,1", "6,2"}},
		{"the same, nothing written after it", []codec.Change{
			keyChange(10, "INSERT", x, "1", "5", "a"), keyChange(10, "INSERT", x, "2", "6", "b"),
		}, []schemaStep{{at: 20, key: yx, keyKnown: true}}, yx, map[string]string{"1": "a", "2": "b"}, []string{"5,1", "6,2"}},
		{"a key added to a table without one, seen in its rows", []codec.Change{
			keyChange(10, "INSERT", nil, "1", "5", "a"), keyChange(10, "INSERT", nil, "2", "6", "b"),
			keyChange(30, "UPDATE", x, "1", "5", "c"), keyChange(30, "DELETE", x, "2", "6", "b"),
			keyChange(30, "INSERT", x, "3", "7", "d"),
		}, nil, x, map[string]string{"1": "c", "3": "d"}, nil},
		{"a key dropped (REPLICA IDENTITY FULL)", []codec.Change{
			keyChange(10, "INSERT", x, "1", "5", "a"), keyChange(10, "INSERT", x, "2", "6", "b"),
			keyChange(30, "DELETE", nil, "1", "5", "a"),
		}, []schemaStep{{at: 20, keyKnown: true}}, nil, map[string]string{"2": "b"}, nil},
	} {
		streams := []storage.ChangeStream{{Dispatcher: "p1.1", Database: "public", Table: "t", Changes: c.changes}}
		set, _, _ := rebuildSet(streams, c.steps, "public.t", 100)
		if !slices.Equal(set.key(), c.key) {
			t.Errorf("%s: rebuilt under key %v, want %v", c.name, set.key(), c.key)
			continue
		}
		got := map[string]string{}
		set.each(func(row map[string]*string) {
			got[(&codec.Change{PkNames: []string{"x"}, Data: row}).Key()] = *row["v"]
		})
		want := c.rows
		if len(got) != len(want) || len(set.rows()) != len(want) {
			t.Errorf("%s: rebuilt %v, want %v", c.name, got, want)
			continue
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: row x=%s is %q, want %q", c.name, k, got[k], v)
			}
		}
		for _, k := range c.keys {
			if set.rows()[k] == nil {
				t.Errorf("%s: no row under key %s in %v", c.name, k, keysOf(set.rows()))
			}
		}
	}
}

// Two rows of a table keyed by two text columns whose texts hold commas,
// ('x,y', 'z') and ('x', 'y,z'), are two rows, in the sink rebuilt as
// upstream: their keys were both "x,y,z", and one took the other's place
// (a row lost in the sink went unseen).
func TestKeysWithCommasNameTheirOwnRows(t *testing.T) {
	xy := []string{"x", "y"}
	streams := []storage.ChangeStream{{Dispatcher: "p1.1", Database: "public", Table: "t", Changes: []codec.Change{
		keyChange(10, "INSERT", xy, "x,y", "z", "a"), keyChange(10, "INSERT", xy, "x", "y,z", "b"),
		keyChange(20, "DELETE", xy, "x", "y,z", "b"),
	}}}
	set, _, _ := rebuildSet(streams, nil, "public.t", 100)
	rows := set.rows()
	if len(rows) != 1 || rows[model.JoinKeyTexts([]string{"x,y", "z"})] == nil {
		t.Fatalf("rebuilt %d rows: %v; want the one of ('x,y', 'z')", len(rows), rows)
	}
	if a, b := model.JoinKeyTexts([]string{"x,y", "z"}), model.JoinKeyTexts([]string{"x", "y,z"}); a == b {
		t.Fatalf("two keys are named alike: %q", a)
	}
}
