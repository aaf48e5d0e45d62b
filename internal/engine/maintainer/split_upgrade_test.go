package maintainer

import (
	"context"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/actor"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/model"
)

// In a rolling upgrade the node that stopped a partition for a split may
// be older than Span.KeyColumns: its saved state's span lacks the key's
// column names that the routing table's span carries. The split goes by
// the range, and cuts the state (before, the exact match failed and the
// range stayed Draining); the halves' state carries the route's span.
func TestASplitCutsStateSavedByAnAgentOlderThanKeyColumns(t *testing.T) {
	ctx := context.Background()
	store, err := checkpoint.OpenBlob(ctx, "file://"+t.TempDir()+"/states", "test")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h := &Host{cfg: HostConfig{Checkpoints: store}}
	span := model.Span{Table: "public.t", Start: "", End: "", Key: "int4", KeyColumns: "(id)"}
	r := model.RouteEntry{ID: "p1", Changefeed: "pg", Span: span, Epoch: 3, SplitKey: key(t, "500")}
	old := span
	old.KeyColumns = ""
	for _, saved := range []model.Span{old, span} {
		b, err := actor.NewReplication(saved, 90).Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Save(ctx, "pg", "p1", 3, b); err != nil {
			t.Fatal(err)
		}
		if err := h.splitState(ctx, r, "p2", 100); err != nil {
			t.Fatalf("state saved with span %+v: %v", saved, err)
		}
		for id, want := range map[string]model.Span{
			"p1": {Table: span.Table, End: r.SplitKey, Key: span.Key, KeyColumns: span.KeyColumns},
			"p2": {Table: span.Table, Start: r.SplitKey, Key: span.Key, KeyColumns: span.KeyColumns},
		} {
			a, err := checkpoint.LoadActor(ctx, store, "pg", id)
			if err != nil {
				t.Fatal(err)
			}
			if a.Span() != want || a.Position() != 100 {
				t.Fatalf("state saved with span %+v: %s is cut to %+v at %v, want %+v at 100", saved, id, a.Span(), a.Position(), want)
			}
		}
	}
	// A state for another range is still refused.
	other := span
	other.Start = key(t, "7")
	b, _ := actor.NewReplication(other, 90).Snapshot()
	if err := store.Save(ctx, "pg", "p1", 5, b); err != nil {
		t.Fatal(err)
	}
	if err := h.splitState(ctx, r, "p2", 100); err == nil {
		t.Fatal("a saved state of another range was cut")
	}
}

func key(t *testing.T, v string) string {
	t.Helper()
	k, err := model.EncodeKey("int4", v)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
