package maintainer

import (
	"context"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// openSource is a changefeed's source as this host opened it; a
// changefeed removed and created again under its name has another
// creation time.
type openSource struct {
	info model.ChangefeedInfo // the incarnation it was opened for
	src  source.Source
}

// source returns the changefeed's source, opened once per incarnation.
func (h *Host) source(ctx context.Context, e *meta.ChangefeedEntry) (source.Source, error) {
	if h.cfg.Faults != nil {
		if err := h.cfg.Faults.BeforeBootstrap(e.Info.ID); err != nil {
			return nil, bootstrapError{err}
		}
	}
	h.mu.Lock()
	o, ok := h.sources[e.Info.ID]
	h.mu.Unlock()
	if ok && o.info.SameIncarnation(e.Info) {
		return o.src, nil
	}
	src, err := sources.Open(ctx, e.Info.SourceURI, source.Env{Changefeed: e.Info.ID, Logs: h.reads, Log: h.log})
	if err != nil {
		return nil, bootstrapError{err}
	}
	h.mu.Lock()
	h.sources[e.Info.ID] = openSource{info: e.Info, src: src}
	h.mu.Unlock()
	if ok {
		_ = o.src.Close()
	}
	return src, nil
}

// closeSources closes the sources of changefeeds no longer in st (nil:
// all of them).
func (h *Host) closeSources(st *meta.State) {
	h.mu.Lock()
	var closing []source.Source
	for id, o := range h.sources {
		if st != nil {
			if e, ok := st.Changefeeds[id]; ok && e.Info.SameIncarnation(o.info) {
				continue
			}
		}
		closing = append(closing, o.src)
		delete(h.sources, id)
	}
	h.mu.Unlock()
	for _, src := range closing {
		_ = src.Close()
	}
}

// openBarriers opens a table's DDL barrier once every partition of the
// table has made all rows before the table's next DDL durable (its
// checkpoint is just below the DDL). The first partition of the table
// writes the DDL; the others wait for it.
//
// It runs on every pass, so it costs little per table: the routing table
// is sorted by table, so a table's partitions are one run of it, and a
// table with no DDL after the changefeed's checkpoint (below every
// partition's position) is passed over without looking at its partitions
// (a pass over 100,000 tables grouped them in a map and looked up every
// position: a tenth of the maintainer's capture's CPU).
func (h *Host) openBarriers(ctx context.Context, st *meta.State, e *meta.ChangefeedEntry, mf meta.MaintainerFence, pos model.ProgressTable, src source.Source) error {
	now := model.TsFromTime(time.Now()).WithLogical(1)
	floor := max(e.Status.CheckpointTs, e.Info.StartTs)
	routes := st.SortedPartitions(e.Info.ID)
	for i := 0; i < len(routes); {
		table := routes[i].Route.Span.Table
		j := i + 1
		for j < len(routes) && routes[j].Route.Span.Table == table {
			j++
		}
		of := routes[i:j]
		i = j
		if len(src.DDLs(table, floor, now)) == 0 {
			continue
		}
		low := model.Ts(0)
		for k, r := range of {
			if cp := pos[r.Route.ID].Checkpoint; k == 0 || cp < low {
				low = cp
			}
		}
		next := src.DDLs(table, low, now)
		if len(next) == 0 || low < next[0].CommitTs-1 {
			continue // some partition has not reached the next DDL yet
		}
		ddl := next[0]
		rec, exists := st.Barriers[e.Info.ID][table]
		if exists && rec.Barrier.DDLTs >= ddl.CommitTs {
			continue
		}
		b := model.Barrier{Table: table, DDLTs: ddl.CommitTs, Writer: of[0].Route.ID}
		if err := h.store.SetBarrier(ctx, mf, e.Info.ID, b, rec.Revision); err != nil {
			return err
		}
		h.log.Info("maintainer: every partition reached the DDL; barrier open", "changefeed", e.Info.ID, "table", table, "ddl_ts", ddl.CommitTs, "writer", b.Writer)
	}
	return nil
}
