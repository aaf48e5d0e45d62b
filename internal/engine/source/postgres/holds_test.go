package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A renamed table is held where its rows under the new name begin, and
// a dropped one reported; the other table's rows go on arriving, and
// the reader never stops. A reader started again after the rename holds
// the table from the start (it no longer exists under its name).
func TestARenamedTableIsHeldAndADroppedOneReportedWhileTheOthersGoOn(t *testing.T) {
	was := dropCheckEvery
	dropCheckEvery = 200 * time.Millisecond
	t.Cleanup(func() { dropCheckEvery = was })
	srv, dsn := newDB(t, `CREATE TABLE a (id int4 PRIMARY KEY, v text);
		CREATE TABLE b (id int4 PRIMARY KEY, v text);
		CREATE TABLE c (id int4 PRIMARY KEY, v text)`)
	ctx := context.Background()
	uri, pos, err := Pin(ctx, dsn+"&tables=a,b,c", "held", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(uri, source.Env{Changefeed: "held"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	log := &memLog{}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Pull(pctx, pos, log) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the reader stopped: %v", err)
		}
	}()

	psql(t, srv, dsn, `INSERT INTO a VALUES (1, 'a1'); INSERT INTO b VALUES (1, 'b1'); INSERT INTO c VALUES (1, 'c1')`)
	psql(t, srv, dsn, `ALTER TABLE b RENAME TO b2`)
	psql(t, srv, dsn, `INSERT INTO b2 VALUES (2, 'b2'); INSERT INTO a VALUES (2, 'a2')`)
	psql(t, srv, dsn, `DROP TABLE c`)
	psql(t, srv, dsn, `INSERT INTO a VALUES (3, 'a3')`)

	issue := func(table, state string) *source.TableIssue {
		for _, i := range src.TableIssues() {
			if i.Table == table && i.State == state {
				return &i
			}
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for issue("public.c", source.TableDropped) == nil || issue("public.b", source.TableHeld) == nil || !logHas(log, "public.a", "a3") {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the reader stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: issues %+v, a3 arrived %v", src.TableIssues(), logHas(log, "public.a", "a3"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	held := issue("public.b", source.TableHeld)
	if !strings.Contains(held.Reason, "renamed upstream to public.b2") || !strings.Contains(held.Reason, "changefeed update held --remove-table public.b --add-table public.b2") {
		t.Fatalf("the hold says: %s", held.Reason)
	}
	log.mu.Lock()
	at, ok := log.holds["public.b"]
	var b1At, b2Seen = time.Duration(0), false
	for _, e := range log.evs {
		if e.Table == "public.b" && e.Kind == source.KindDML {
			if e.New[1].Text == "b2" {
				b2Seen = true
			}
			if e.CommitTs >= at {
				b1At = 1
			}
		}
	}
	log.mu.Unlock()
	if !ok || at != held.At {
		t.Fatalf("the log holds public.b at %v (%v), the issue says %v", at, ok, held.At)
	}
	if b2Seen || b1At != 0 {
		t.Fatal("a row of the renamed table at or after its hold reached the log")
	}
	if !logHas(log, "public.b", "b1") || !logHas(log, "public.c", "c1") {
		t.Fatal("rows written before the rename and the drop are missing")
	}

	// A new run: the table is not found under its name.
	cancel()
	<-done
	done <- nil
	again, err := Open(uri, source.Env{Changefeed: "held"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	log2 := &memLog{}
	ctx2, cancel2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- again.Pull(ctx2, pos, log2) }()
	for deadline := time.Now().Add(30 * time.Second); !logHas(log2, "public.a", "a3"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel2()
			t.Fatalf("the second run did not reach a3: %v", <-done2)
		}
	}
	cancel2()
	if err := <-done2; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	log2.mu.Lock()
	_, heldAgain := log2.holds["public.b"]
	log2.mu.Unlock()
	if !heldAgain {
		t.Fatal("the second run did not hold the renamed table")
	}
}

// logHas says whether a row of a table with value v in its second column
// reached the log.
func logHas(l *memLog, table, v string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		if e.Kind == source.KindDML && e.Table == table && len(e.New) > 1 && e.New[1].Text == v {
			return true
		}
	}
	return false
}
