package meta

import (
	"reflect"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// LoadChangefeed reads one changefeed's own records as Load reads them
// (its definition, status and its revision, maintainer, positions), and
// nothing of the rest of the cluster: not its routing table, not another
// changefeed "big2" whose name starts with its own, not one missing.
func TestLoadChangefeedReadsOnlyThatChangefeed(t *testing.T) {
	f, _ := newBigFeed(t, 50)
	if _, err := f.store.CreateChangefeed(f.ctx, f.fence, model.ChangefeedInfo{ID: "big2", StartTs: 1}, nil, []model.Span{{Table: "other"}}); err != nil {
		t.Fatal(err)
	}
	all := f.load()
	one, err := f.store.LoadChangefeed(f.ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := one.Changefeeds["big"], all.Changefeeds["big"]; got == nil || !reflect.DeepEqual(*got, *want) {
		t.Fatalf("big read alone: %+v\nread with the cluster: %+v", got, want)
	}
	if !reflect.DeepEqual(one.Progress["big"], all.Progress["big"]) {
		t.Fatalf("big's positions read alone differ from the cluster's")
	}
	if len(one.Changefeeds) != 1 || len(one.Partitions) != 0 {
		t.Fatalf("read %d changefeeds and the routing tables of %d; want big's records only", len(one.Changefeeds), len(one.Partitions))
	}
	none, err := f.store.LoadChangefeed(f.ctx, "absent")
	if err != nil || len(none.Changefeeds) != 0 {
		t.Fatalf("a changefeed that does not exist: %v, %d changefeeds", err, len(none.Changefeeds))
	}
}
