package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/pgserver"
	"github.com/cdcctl/cdcctl/internal/pgserver/pgtest"
)

// A slot dropped outside cdcctl took with it the changes the changefeed
// resumes from: the reader fails as unresumable, saying so and what to
// do, instead of retrying for ever with advice about max_replication_slots
// (an invalidated slot, its WAL past max_slot_wal_keep_size, likewise).
func TestASlotDroppedOutsideCdcctlFailsTheReaderSayingWhatToDo(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY)`)
	st, cfg, up := open(t, dsn+"&tables=t")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	dropSlot(t, srv, cfg.Slot)
	_, err := OpenStream(context.Background(), cfg, up.StartLSN, 0, map[string]TableState{}, false, "")
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "replication slot "+cfg.Slot+" does not exist: it was dropped outside cdcctl") ||
		!strings.Contains(err.Error(), "remove the changefeed and create it again") {
		t.Fatalf("resuming from a dropped slot: %v", err)
	}
	// Asked before a resume (or an update's new connection), the same.
	pos, err := json.Marshal(position{LSN: up.StartLSN.String()})
	if err != nil {
		t.Fatal(err)
	}
	err = Resumable(context.Background(), dsn+"&tables=t&slot="+cfg.Slot+"&publication="+cfg.Publication, pos)
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "replication slot "+cfg.Slot+" does not exist: it was dropped outside cdcctl") {
		t.Fatalf("asked whether a changefeed can resume from a dropped slot: %v", err)
	}
}

// dropSlot drops a slot whose stream was just closed: its walsender may
// hold it a moment after the close.
func dropSlot(t *testing.T, srv *pgserver.Server, slot string) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err = srv.Psql(context.Background(), "postgres", "SELECT pg_drop_replication_slot('"+slot+"')"); err == nil {
			return
		}
	}
	t.Fatal(err)
}

// A slot created again outside cdcctl (by hand, or after an upgrade that
// did not carry it) begins after the changefeed's resume point, and
// PostgreSQL would stream from its own position without a word: the rows
// written in between would never arrive. The reader fails as
// unresumable instead, saying so and what to do.
func TestASlotCreatedAgainPastTheResumePointFailsTheReader(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY)`)
	st, cfg, up := open(t, dsn+"&tables=t")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	psql(t, srv, dsn, `INSERT INTO t SELECT generate_series(1, 10)`)
	dropSlot(t, srv, cfg.Slot)
	psql(t, srv, dsn, `SELECT pg_create_logical_replication_slot('`+cfg.Slot+`', 'pgoutput')`)
	_, err := OpenStream(context.Background(), cfg, up.StartLSN, 0, map[string]TableState{}, false, "")
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "replication slot "+cfg.Slot+" begins at ") ||
		!strings.Contains(err.Error(), ", after "+up.StartLSN.String()+" where the changefeed resumes") || !strings.Contains(err.Error(), "remove the changefeed and create it again") {
		t.Fatalf("resuming from a slot created again: %v", err)
	}
}

// A resume point read from one database cluster means nothing on
// another's server (a source URI pointed elsewhere): the stream names the
// cluster it reads, and one opened with another's identifier is refused
// as unresumable, saying what to do; its own opens.
func TestAResumePointOfAnotherClusterIsRefused(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY)`)
	st, cfg, up := open(t, dsn+"&tables=t")
	system := st.System
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if system == "" || system == "0" {
		t.Fatalf("the stream names no cluster: %q", system)
	}
	again, err := reopen(func() (*Stream, error) {
		return OpenStream(context.Background(), cfg, up.StartLSN, 0, map[string]TableState{}, false, system)
	})
	if err == nil {
		_ = again.Close()
	}
	if err != nil {
		t.Fatalf("resuming on the same cluster: %v", err)
	}
	_, err = OpenStream(context.Background(), cfg, up.StartLSN, 0, map[string]TableState{}, false, "7345678901234567890")
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "is another database cluster (system identifier "+system+") than the one the changefeed read (7345678901234567890)") ||
		!strings.Contains(err.Error(), "point the source back at that server") {
		t.Fatalf("resuming on another cluster: %v", err)
	}
}

// A server whose walsenders are all taken (max_wal_senders, or a killed
// reader's walsender not yet timed out) is worth trying again: the
// check of a new connection says so (an update answers 503, nothing
// changed) and names the setting, as does the reader's start, which its
// puller retries.
func TestAServerWithNoWalsenderFreeIsWorthTryingAgain(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartDB(t, "demo", "max_wal_senders=1")
	if _, err := srv.Psql(context.Background(), "demo", `CREATE TABLE t (id int4 PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("demo")
	st, cfg, up := open(t, dsn+"&tables=t")
	pos, err := json.Marshal(position{LSN: up.StartLSN.String()})
	if err != nil {
		t.Fatal(err)
	}
	// The stream holds the one walsender.
	defer st.Close()
	want := "max_wal_senders"
	err = Resumable(context.Background(), dsn+"&tables=t&slot="+cfg.Slot+"&publication="+cfg.Publication, pos)
	if !errors.Is(err, model.ErrUnreachable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("checking a server with no walsender free: %v; want it worth a retry, naming %s", err, want)
	}
	_, err = OpenStream(context.Background(), cfg, up.StartLSN, 0, map[string]TableState{}, false, "")
	if !errors.Is(err, model.ErrUnreachable) || errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a reader's start with no walsender free: %v; want it worth a retry", err)
	}
}

// A publication dropped (DROP PUBLICATION, or DROP OWNED BY the
// changefeed's user) fails the reader as unresumable, saying what to do,
// also when one of its name was created again: pgoutput reads the
// catalog as it was at each change, and every start of the stream meets
// the drop. Before, the reader was retried for ever.
func TestAPublicationDroppedFailsTheReaderSayingWhatToDo(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY)`)
	st, cfg, up := open(t, dsn+"&tables=t")
	psql(t, srv, dsn, "DROP PUBLICATION "+cfg.Publication+"; INSERT INTO t VALUES (1)")
	// changefeed get says so, not to add the table to it.
	if ss, err := Inspect(context.Background(), cfg.URI(), nil); err != nil || len(ss.Warnings) != 1 || !strings.Contains(ss.Warnings[0], "publication "+cfg.Publication+" does not exist") {
		t.Fatalf("the status of a changefeed whose publication was dropped: %+v, %v", ss, err)
	}
	psql(t, srv, dsn, "CREATE PUBLICATION "+cfg.Publication+" FOR TABLE t; INSERT INTO t VALUES (2)")
	read := func(st *Stream) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			if _, err := st.Next(ctx); err != nil {
				return err
			}
		}
	}
	for run := 1; run <= 2; run++ {
		err := read(st)
		if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "publication "+cfg.Publication+" does not exist") ||
			!strings.Contains(err.Error(), "remove the changefeed and create it again") {
			t.Fatalf("run %d: the stream after its publication was dropped and created again: %v", run, err)
		}
		st.Close()
		// Started again from where it began: the same (once the closed
		// stream's walsender has let the slot go).
		var oerr error
		if st, oerr = reopen(func() (*Stream, error) {
			return OpenStream(context.Background(), cfg, up.StartLSN, 0, map[string]TableState{}, false, "")
		}); oerr != nil {
			t.Fatal(oerr)
		}
	}
	st.Close()
}

// A slot PostgreSQL invalidated (its WAL past max_slot_wal_keep_size
// while the changefeed was stopped) fails the reader as unresumable,
// saying so and what to do, on a server of its own set so: the reader
// and a resume's check alike.
func TestASlotPostgreSQLInvalidatedFailsTheReaderSayingWhatToDo(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartDB(t, "shop", "max_slot_wal_keep_size=1MB", "max_wal_size=32MB", "min_wal_size=32MB")
	dsn := pg.DSN("shop")
	if _, err := pg.Psql(context.Background(), "shop", "CREATE TABLE t (id int4 PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	st, cfg, up := open(t, dsn+"&tables=t")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// WAL past the slot's allowance, checkpoints until it is lost.
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := pg.Psql(context.Background(), "shop", "INSERT INTO t SELECT g, repeat('x', 1000) FROM generate_series(1, 5000) g ON CONFLICT (id) DO UPDATE SET v = excluded.v || 'y'; SELECT pg_switch_wal(); CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		out, err := pg.Psql(context.Background(), "shop", "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "lost") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not invalidated: %s", out)
		}
	}
	_, err := OpenStream(context.Background(), cfg, up.StartLSN, 0, map[string]TableState{}, false, "")
	if err == nil {
		// PostgreSQL refuses at the first read on some versions.
		t.Fatal("a stream opened on an invalidated slot")
	}
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "PostgreSQL invalidated replication slot "+cfg.Slot) || !strings.Contains(err.Error(), "remove the changefeed and create it again") {
		t.Fatalf("resuming from an invalidated slot: %v", err)
	}
	pos, err := json.Marshal(position{LSN: up.StartLSN.String()})
	if err != nil {
		t.Fatal(err)
	}
	err = Resumable(context.Background(), cfg.URI(), pos)
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), "invalidated") {
		t.Fatalf("asked whether a changefeed can resume from an invalidated slot: %v", err)
	}
}

// A resume point past where the server's WAL ends is not this server's
// history (a standby promoted before it had received all the changefeed
// read: a failover under asynchronous replication; a server restored
// from a backup): refused, the changefeed failed with the reason, both
// by the reader's start and by the check before a resume. Before, a slot
// created there again by hand (it begins before the resume point, which
// the slot check allows) streamed from the resume point, passing over
// the new server's own changes up to it.
func TestAResumePointPastTheServersWALIsRefused(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY)`)
	st, cfg, up := open(t, dsn+"&tables=t")
	system := st.System
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ahead := up.StartLSN + 1<<30
	want := "has written its WAL up to "
	_, err := reopen(func() (*Stream, error) {
		return OpenStream(context.Background(), cfg, ahead, 0, map[string]TableState{}, false, system)
	})
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "before "+ahead.String()+" where the changefeed resumes") ||
		!strings.Contains(err.Error(), "a standby promoted before it had received all of it") {
		t.Fatalf("a reader's start past the server's WAL: %v", err)
	}
	pos, err := json.Marshal(position{LSN: ahead.String(), System: system})
	if err != nil {
		t.Fatal(err)
	}
	err = Resumable(context.Background(), dsn+"&tables=t&slot="+cfg.Slot+"&publication="+cfg.Publication, pos)
	if !errors.Is(err, source.ErrUnresumable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("the check before a resume past the server's WAL: %v", err)
	}
}
