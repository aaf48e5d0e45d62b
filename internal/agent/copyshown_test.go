package agent

import (
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// What partition list and get say of a partition's copy: how far it is,
// and the key it copies through (its horizon: rows keyed after it were
// written after the copy began, and come through the stream), in byte
// ranges and in the key's index order; nothing of a horizon once done.
func TestAPartitionSaysHowFarItCopiesAndWhereItStops(t *testing.T) {
	key := func(v string) string {
		k, err := model.EncodeKey("int8", v)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	text := func(v string) string {
		k, err := model.EncodeKey("text", v)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for _, c := range []struct {
		keyTypes string
		copy     model.CopyProgress
		want     string
	}{
		{"int8", model.CopyProgress{Rows: 4096}.CopiedThrough(key("4096")), "copied up to key 4096 (4096 rows)"},
		{"int8", model.CopyProgress{Rows: 4096, Horizon: key("1000000")}.CopiedThrough(key("4096")), "copied up to key 4096 (4096 rows), copying through key 1000000"},
		{"text", model.CopyProgress{Rows: 7, Horizon: text("9999")}.ReadThrough(text("100"), "o", 40), "copying in the key's index order, at key 100 (7 rows of its range, 40 read), copying through key 9999"},
		{"int8", model.CopyProgress{Done: true, Rows: 5, Horizon: key("9")}, "done (5 rows)"},
	} {
		r := meta.RouteRecord{Route: model.RouteEntry{ID: "p.1", Changefeed: "pg", Span: model.Span{Table: "public.t", Key: c.keyTypes}}}
		st := &meta.State{Progress: map[model.ChangefeedID]map[string]meta.ProgressRecord{"pg": {"p.1": {Progress: model.Progress{Copy: c.copy}}}}}
		if got := partitionOf(st, r).Snapshot; got != c.want {
			t.Errorf("copy %+v shown as %q, want %q", c.copy, got, c.want)
		}
	}
}
