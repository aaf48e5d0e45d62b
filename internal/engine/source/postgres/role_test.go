package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A user with REPLICATION that owns its tables and may create in the
// database (for the publication), not a superuser, is all a changefeed
// needs: it creates the publication and slot, copies the
// table between watermarks and resolves from ticks, both written with
// pg_logical_emit_message.
func TestAReplicationUserThatIsNotASuperuserReplicates(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE ROLE cdc LOGIN REPLICATION;
		CREATE TABLE t (id int4 PRIMARY KEY, v text);
		ALTER TABLE t OWNER TO cdc;
		DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO cdc', current_database()); END $$;
		INSERT INTO t SELECT g, 'x' FROM generate_series(1, 100) g`)
	rig := startCopyRig(t, strings.Replace(dsn, "postgres@", "cdc@", 1)+"&tables=t", "role")
	p := rig.run(model.Span{Table: "public.t", Key: "int4"}, rig.start, model.CopyProgress{})
	psql(t, srv, dsn, `INSERT INTO t VALUES (1000, 'after')`)
	p.waitDone(t)
	for deadline := time.Now().Add(30 * time.Second); !p.has("1000"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the row written after the changefeed began did not arrive")
		}
	}
	keys := map[string]bool{}
	for _, e := range p.stopped(t) {
		keys[e.Key] = true
	}
	if len(keys) != 101 {
		t.Fatalf("%d rows arrived, want 101", len(keys))
	}
	// Such a user cannot create the event trigger that sees a column
	// rewritten under its own type (rewrites.go): changefeed get says so,
	// and what to do.
	st, err := Inspect(context.Background(), rig.src.cfg.URI(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(st.Warnings, "\n"); !strings.Contains(w, "no event trigger "+rewriteTrigger(rig.src.cfg)) || !strings.Contains(w, "changefeed update --copy-table") {
		t.Fatalf("warnings: %q", st.Warnings)
	}
	rig.stop(t)
}
