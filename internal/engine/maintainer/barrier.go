package maintainer

import (
	"context"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
)

func (h *Host) source(e *meta.ChangefeedEntry) (*gen.Generator, error) {
	h.mu.Lock()
	g, ok := h.sources[e.Info.ID]
	h.mu.Unlock()
	if ok && g.Config().StartMillis == e.Info.StartTs.Millis() {
		return g, nil
	}
	cfg, err := gen.ParseURI(e.Info.SourceURI)
	if err != nil {
		return nil, err
	}
	g, err = gen.New(cfg)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.sources[e.Info.ID] = g
	h.mu.Unlock()
	return g, nil
}

// openBarriers opens a table's DDL barrier once every partition of the
// table has made all rows before the table's next DDL durable (its
// checkpoint is just below the DDL). The first partition of the table
// writes the DDL; the others wait for it.
func (h *Host) openBarriers(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence, pos model.ProgressTable) error {
	g, err := h.source(e)
	if err != nil {
		return err
	}
	byTable := map[string][]meta.RouteRecord{}
	var tables []string
	for _, r := range st.SortedPartitions(e.Info.ID) {
		if _, seen := byTable[r.Route.Span.Table]; !seen {
			tables = append(tables, r.Route.Span.Table)
		}
		byTable[r.Route.Span.Table] = append(byTable[r.Route.Span.Table], r)
	}
	for _, table := range tables {
		routes := byTable[table]
		low := model.Ts(0)
		for i, r := range routes {
			cp := pos[r.Route.ID].Checkpoint
			if i == 0 || cp < low {
				low = cp
			}
		}
		next := g.DDLs(table, low, model.TsFromTime(time.Now()).WithLogical(1))
		if len(next) == 0 || low < next[0].CommitTs-1 {
			continue // some partition has not reached the next DDL yet
		}
		ddl := next[0]
		rec, exists := st.Barriers[e.Info.ID][table]
		if exists && rec.Barrier.DDLTs >= ddl.CommitTs {
			continue
		}
		b := model.Barrier{Table: table, DDLTs: ddl.CommitTs, Writer: routes[0].Route.ID}
		if err := h.store.SetBarrier(ctx, mf, e.Info.ID, b, rec.Revision); err != nil {
			return err
		}
		h.log.Info("maintainer: every partition reached the DDL; barrier open", "changefeed", e.Info.ID, "table", table, "ddl_ts", ddl.CommitTs, "writer", b.Writer)
	}
	return nil
}
