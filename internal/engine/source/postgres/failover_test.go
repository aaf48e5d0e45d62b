package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A failover to a standby that had not received all the changefeed read
// (asynchronous replication): the standby, promoted, branched onto a
// timeline of its own before the resume point, and has written past it
// since. A slot made there again by hand (PostgreSQL before 17 carries
// none) begins before the resume point, which the slot check allows; the
// stream would pass over the new primary's own changes from the branch
// up to the resume point. The resume point keeps its timeline, and the
// server's history says where it branched: refused, both by the reader's
// start and the check before a resume.
func TestAResumePointPastWhereAPromotedStandbyBranchedIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := pgtest.StartDB(t, "shop")
	if _, err := primary.Psql(ctx, "shop", `CREATE TABLE t (id int4 PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	// A changefeed's first resume point names its cluster and timeline
	// already (not at its reader's first start).
	_, first, err := Pin(ctx, primary.DSN("shop")+"&tables=t", "other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var p position
	if err := source.DecodePosition(first, &p); err != nil || p.System == "" || p.Timeline != 1 {
		t.Fatalf("a new changefeed's first resume point: cluster %q, timeline %d (%v)", p.System, p.Timeline, err)
	}
	st, cfg, _ := open(t, primary.DSN("shop")+"&tables=t")
	dir, err := os.MkdirTemp("", "cdcctl-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	standby, err := primary.Standby(ctx, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	// The standby stops receiving; the changefeed reads on.
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}
	psql(t, primary, primary.DSN("shop"), `INSERT INTO t SELECT g FROM generate_series(100000, 130000) g`)
	psql(t, primary, primary.DSN("shop"), `INSERT INTO t VALUES (1)`)
	from := txns(t, st, 2)[1].EndLSN
	system, timeline := st.System, st.Timeline
	_ = st.Close()
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	// The failover: the standby promoted, the slot made again by hand,
	// the new primary's own changes past the resume point.
	if err := standby.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := standby.Psql(ctx, "shop", `SELECT pg_create_logical_replication_slot('`+cfg.Slot+`', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	if _, err := standby.Psql(ctx, "shop", `INSERT INTO t SELECT g FROM generate_series(2, 60000) g`); err != nil {
		t.Fatal(err)
	}
	moved := cfg
	moved.ConnString = strings.Replace(cfg.ConnString, ":"+strconv.Itoa(primary.Port)+"/", ":"+strconv.Itoa(standby.Port)+"/", 1)
	moved.timeline = timeline
	want := "branched from timeline " + strconv.Itoa(int(timeline)) + " at "
	_, err = OpenStream(ctx, moved, from, 0, map[string]TableState{}, false, system)
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "before the resume point") {
		t.Fatalf("a reader's start on the promoted standby: %v", err)
	}
	pos, err := json.Marshal(position{LSN: from.String(), System: system, Timeline: timeline})
	if err != nil {
		t.Fatal(err)
	}
	uri := standby.DSN("shop") + "&tables=t&slot=" + cfg.Slot + "&publication=" + cfg.Publication
	if err := Resumable(ctx, uri, pos); !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("the check before a resume on the promoted standby: %v", err)
	}
}
