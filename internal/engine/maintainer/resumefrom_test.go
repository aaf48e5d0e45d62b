package maintainer

import (
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A run of the reader tried again starts from the resume point this host
// stored when etcd's view has not caught up with it (the upstream has
// forgotten what precedes it: PostgreSQL's slot was confirmed there),
// but only for the same incarnation, placement and run: a point stored
// before a resume, an update or a move is never taken over the entry's.
func TestARetriedReaderStartsFromItsOwnNewerStoredPointOnly(t *testing.T) {
	created := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	info := model.ChangefeedInfo{ID: "shop", CreatedAt: created}
	entry := func(mod func(e *meta.ChangefeedEntry)) *meta.ChangefeedEntry {
		e := &meta.ChangefeedEntry{Info: info}
		e.Maintainer = model.MaintainerPlacement{Node: "capture-1", Epoch: 4}
		e.Status.Run, e.Status.CheckpointTs, e.Status.SourcePosition = 2, 100, []byte(`{"lsn":"0/100"}`)
		if mod != nil {
			mod(e)
		}
		return e
	}
	p := &pulling{info: info, epoch: 4, run: 2, stored: []byte(`{"lsn":"0/200"}`), storedAt: 200}
	for _, c := range []struct {
		name string
		mod  func(e *meta.ChangefeedEntry)
		want string
	}{
		{"the view behind the stored point", nil, `{"lsn":"0/200"}`},
		{"the view caught up", func(e *meta.ChangefeedEntry) {
			e.Status.CheckpointTs, e.Status.SourcePosition = 200, []byte(`{"lsn":"0/200","ts":1}`)
		}, `{"lsn":"0/200","ts":1}`},
		{"another placement (a move)", func(e *meta.ChangefeedEntry) { e.Maintainer.Epoch = 5 }, `{"lsn":"0/100"}`},
		{"another run (a resume)", func(e *meta.ChangefeedEntry) { e.Status.Run = 3 }, `{"lsn":"0/100"}`},
		{"another incarnation (an update)", func(e *meta.ChangefeedEntry) { e.Info.UpdatedAt = created.Add(time.Minute) }, `{"lsn":"0/100"}`},
		{"the changefeed created again", func(e *meta.ChangefeedEntry) { e.Info.CreatedAt = created.Add(time.Hour) }, `{"lsn":"0/100"}`},
	} {
		if got := string(p.resumeFrom(entry(c.mod))); got != c.want {
			t.Errorf("%s: starts from %s; want %s", c.name, got, c.want)
		}
	}
	if got := string((&pulling{info: info, epoch: 4, run: 2}).resumeFrom(entry(nil))); got != `{"lsn":"0/100"}` {
		t.Errorf("nothing stored yet: starts from %s", got)
	}
}
