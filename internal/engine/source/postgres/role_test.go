package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
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
	ctx := context.Background()
	user := strings.Replace(dsn, "postgres@", "cdc@", 1)
	uri, pos, err := Pin(ctx, user+"&tables=t", "role", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(uri, source.Env{Changefeed: "role"})
	if err != nil {
		t.Fatal(err)
	}
	log := &memLog{}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Pull(pctx, pos, log) }()
	psql(t, srv, dsn, `INSERT INTO t VALUES (1000, 'after')`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the reader stopped: %v", err)
		default:
		}
		_, resolved := src.ResumePoint(model.Ts(1<<62 - 1))
		if log.count() == 101 && log.has("1000") && resolved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows arrived", log.count())
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
