package postgres

import (
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
	srv, dsn := newDB(t, `CREATE ROLE cdc LOGIN REPLICATION;
		CREATE TABLE t (id int4 PRIMARY KEY, v text);
		ALTER TABLE t OWNER TO cdc;
		DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO cdc', current_database()); END $$;
		INSERT INTO t SELECT g, 'x' FROM generate_series(1, 100) g`)
	r := startPulling(t, strings.Replace(dsn, "postgres@", "cdc@", 1)+"&tables=t", "role")
	psql(t, srv, dsn, `INSERT INTO t VALUES (1000, 'after')`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r.running(t)
		_, resolved := r.src.ResumePoint(model.Ts(1<<62 - 1))
		if r.log.count() == 101 && r.log.has("1000") && resolved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows arrived", r.log.count())
		}
	}
	r.stop(t)
}
