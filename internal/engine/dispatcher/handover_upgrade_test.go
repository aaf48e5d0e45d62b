package dispatcher

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/actor"
	"github.com/cdcctl/cdcctl/internal/engine/checkpoint"
	"github.com/cdcctl/cdcctl/internal/model"
)

// In a rolling upgrade the node that handed a partition over may be
// older than Span.KeyColumns: its saved state's span lacks the key's
// column names that the routing table's span carries. The graceful
// hand-over goes by the range (before, the exact match failed it); a
// state of another range or past the hand-over is still refused.
func TestAHandOverTakesStateSavedByAnAgentOlderThanKeyColumns(t *testing.T) {
	ctx := context.Background()
	store, err := checkpoint.OpenBlob(ctx, "file://"+t.TempDir()+"/states", "test")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m := &Manager{cfg: ManagerConfig{Checkpoints: store}}
	end, err := model.EncodeKey("int4", "1000")
	if err != nil {
		t.Fatal(err)
	}
	span := model.Span{Table: "public.t", End: end, Key: "int4", KeyColumns: "(id)"}
	r := model.RouteEntry{ID: "p1", Changefeed: "pg", Span: span, Epoch: 2, Start: 100}
	save := func(s model.Span, at model.Ts) {
		t.Helper()
		b, err := actor.NewReplication(s, at).Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Save(ctx, "pg", "p1", 2, b); err != nil {
			t.Fatal(err)
		}
	}
	old := span
	old.KeyColumns = ""
	for _, s := range []model.Span{old, span} {
		save(s, 100)
		if err := m.prepare(ctx, r); err != nil {
			t.Fatalf("state saved with span %+v: %v", s, err)
		}
	}
	other := span
	other.End = ""
	for what, s := range map[string]func(){
		"another range":      func() { save(other, 100) },
		"past the hand-over": func() { save(old, 101) },
	} {
		s()
		if err := m.prepare(ctx, r); err == nil || !strings.Contains(err.Error(), "the routing table gives") {
			t.Fatalf("a saved state of %s: %v", what, err)
		}
	}
}
