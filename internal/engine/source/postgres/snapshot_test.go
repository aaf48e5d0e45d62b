package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The initial snapshot under writes: 10,000 rows exist (15 chunks),
// a workload updates, deletes and inserts rows of every chunk while the
// snapshot runs, and the rows the reader delivered, applied in order,
// equal the table afterwards; the snapshot's progress reaches the end.
func TestTheInitialSnapshotIsConsistentWithTheStream(t *testing.T) {
	snapshotUnderWrites(t, false)
}

// A column added while the snapshot runs: chunks read before it are
// emitted under the old schema, or, when the change lands between a
// chunk's read and its high watermark, the reader stops and starts again
// from its resume point (as the maintainer restarts it) and reads the
// chunk again. The rows still equal the table.
func TestASchemaChangeDuringTheSnapshot(t *testing.T) {
	snapshotUnderWrites(t, true)
}

func snapshotUnderWrites(t *testing.T, ddl bool) {
	srv, dsn := newDB(t, `CREATE TABLE t (id int8 PRIMARY KEY, v text, n int4);
		INSERT INTO t SELECT g, md5(g::text), 0 FROM generate_series(1, 10000) g;
		CREATE TABLE empty (k text PRIMARY KEY)`)
	ctx := context.Background()
	defer func(n int) { chunkRows = n }(chunkRows)
	chunkRows = 700 // 15 chunks, three in flight at a time
	uri, pos, err := Pin(ctx, dsn+"&tables=t,empty", "snap", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(uri, source.Env{Changefeed: "snap"})
	if err != nil {
		t.Fatal(err)
	}
	log := &memLog{}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	restarts := 0
	go func() {
		for {
			err := src.Pull(pctx, pos, log)
			if pctx.Err() != nil || !strings.Contains(fmt.Sprint(err), "changed while a chunk was read") {
				done <- err
				return
			}
			// As the maintainer does: a new log from the last resume
			// point, which the test takes as the checkpoint.
			restarts++
			p, ok := src.ResumePoint(model.Ts(1<<62 - 1))
			if !ok {
				done <- fmt.Errorf("no resume point after %v", err)
				return
			}
			var at position
			_ = json.Unmarshal(p, &at)
			log.truncate(at.Ts)
			pos = p
		}
	}()
	if ddl {
		// Once a third of the table is copied, add a column.
		for deadline := time.Now().Add(60 * time.Second); log.count() < 3000; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the snapshot did not start")
			}
		}
		psql(t, srv, dsn, `ALTER TABLE t ADD COLUMN w int4 DEFAULT 5`)
	}

	// The workload, while the snapshot runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		rng := rand.New(rand.NewSource(3))
		next := 20001
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := 1 + rng.Intn(10000)
			var err error
			switch rng.Intn(4) {
			case 0:
				_, err = conn.Exec(ctx, `DELETE FROM t WHERE id = $1`, id)
			case 1:
				_, err = conn.Exec(ctx, `INSERT INTO t VALUES ($1, 'new', 1)`, next)
				next++
			default:
				_, err = conn.Exec(ctx, `UPDATE t SET n = n + 1, v = 'upd' WHERE id = $1`, id)
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, ok := src.ResumePoint(model.Ts(1<<62 - 1))
		var got position
		if ok && json.Unmarshal(p, &got) == nil && got.Snapshot == nil && log.count() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot did not finish: %s", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// A last change, to know when the stream has delivered everything.
	psql(t, srv, dsn, `INSERT INTO t VALUES (999999, 'last', 0)`)
	for deadline := time.Now().Add(30 * time.Second); !log.has("999999"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last change did not arrive")
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	rows := map[string]string{}
	inserts := 0
	log.mu.Lock()
	for _, e := range log.evs {
		if e.Kind != source.KindDML {
			continue
		}
		switch k := textKey(&e); e.Op {
		case source.OpDelete:
			delete(rows, k)
		default:
			if e.Op == source.OpInsert {
				inserts++
			}
			rows[k] = e.New[1].Text + "/" + e.New[2].Text
		}
	}
	log.mu.Unlock()
	want := map[string]string{}
	out, err := srv.Psql(ctx, dbOf(dsn), `SELECT id || ' ' || v || '/' || n FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range splitLines(out) {
		var id, rest string
		fmt.Sscan(line, &id, &rest)
		want[id] = rest
	}
	if len(want) < 5000 {
		t.Fatalf("only %d rows upstream", len(want))
	}
	missing, extra, different := 0, 0, 0
	for k, v := range want {
		g, ok := rows[k]
		switch {
		case !ok:
			missing++
		case g != v:
			different++
		}
	}
	for k := range rows {
		if _, ok := want[k]; !ok {
			extra++
		}
	}
	if missing+extra+different > 0 {
		t.Fatalf("rebuilt from the reader: %d missing, %d extra, %d different of %d rows", missing, extra, different, len(want))
	}
	if ddl {
		// Rows read after the change carry the new column.
		log.mu.Lock()
		last := log.evs[len(log.evs)-1]
		log.mu.Unlock()
		if len(last.New) != 4 || last.New[3].Text != "5" {
			t.Fatalf("the last row %+v does not carry the added column", last.New)
		}
	}
	t.Logf("%d rows equal after a snapshot under writes (%d inserts delivered, %d restarts of the reader)", len(want), inserts, restarts)
}

func dbOf(dsn string) string {
	cfg, _ := ParseURI(dsn + "&tables=x")
	c, _ := pgx.ParseConfig(cfg.ConnString)
	return c.Database
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// truncate drops the events after ts: a log rebuilt from a checkpoint.
func (l *memLog) truncate(ts model.Ts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.evs {
		if e.CommitTs <= ts {
			l.evs[n] = e
			n++
		}
	}
	l.evs = l.evs[:n]
}

func (l *memLog) has(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.evs {
		if textKey(&l.evs[i]) == key {
			return true
		}
	}
	return false
}

// A table without a primary key is copied under a SHARE lock, in chunks
// from one cursor, while a workload writes to it (its writes wait for the
// copy): the rows delivered, applied in order as a multiset, equal the
// table afterwards, equal rows counted.
func TestAKeylessTableIsCopiedUnderALock(t *testing.T) {
	srv, dsn := newDB(t, `CREATE TABLE k (kind text, n int4);
		ALTER TABLE k REPLICA IDENTITY FULL;
		INSERT INTO k SELECT 'k' || (g % 50), 0 FROM generate_series(1, 3000) g`)
	ctx := context.Background()
	defer func(n int) { chunkRows = n }(chunkRows)
	chunkRows = 700 // five chunks under one lock
	r := startPulling(t, dsn+"&tables=k", "keyless")
	log := r.log
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(5))
	for i := 0; i < 300; i++ {
		kind := fmt.Sprintf("k%d", rng.Intn(50))
		var err error
		switch rng.Intn(3) {
		case 0:
			_, err = conn.Exec(ctx, `INSERT INTO k VALUES ($1, 0)`, kind)
		case 1:
			_, err = conn.Exec(ctx, `UPDATE k SET n = n + 1 WHERE ctid = (SELECT ctid FROM k WHERE kind = $1 LIMIT 1)`, kind)
		default:
			_, err = conn.Exec(ctx, `DELETE FROM k WHERE ctid = (SELECT ctid FROM k WHERE kind = $1 LIMIT 1)`, kind)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	psql(t, srv, dsn, `INSERT INTO k VALUES ('last', -1)`)
	image := func(vs []source.Value) string { return vs[0].Text + "/" + vs[1].Text }
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		log.mu.Lock()
		n := len(log.evs)
		last := n > 0 && log.evs[n-1].New != nil && image(log.evs[n-1].New) == "last/-1"
		log.mu.Unlock()
		if last {
			break
		}
		r.running(t)
		if time.Now().After(deadline) {
			t.Fatalf("the last change did not arrive (%d events)", n)
		}
	}
	r.stop(t)
	got := map[string]int{}
	log.mu.Lock()
	for _, e := range log.evs {
		switch e.Op {
		case source.OpInsert:
			got[image(e.New)]++
		case source.OpUpdate:
			got[image(e.Old)]--
			got[image(e.New)]++
		case source.OpDelete:
			got[image(e.Old)]--
		}
	}
	log.mu.Unlock()
	want := map[string]int{}
	out, err := srv.Psql(ctx, dbOf(dsn), `SELECT kind || '/' || n FROM k`)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range splitLines(out) {
		want[line]++
	}
	for img, n := range want {
		if got[img] != n {
			t.Errorf("row %s: %d copies delivered, %d upstream", img, got[img], n)
		}
	}
	for img, n := range got {
		if _, ok := want[img]; !ok && n != 0 {
			t.Errorf("row %s: %d copies delivered, none upstream", img, n)
		}
	}
}

// pulling is a changefeed's reader running into a memLog.
type pulling struct {
	src    *Source
	log    *memLog
	cancel context.CancelFunc
	done   chan error
}

// startPulling creates a changefeed on uri and runs its reader.
func startPulling(t *testing.T, uri string, cf model.ChangefeedID) *pulling {
	t.Helper()
	ctx := context.Background()
	stored, pos, err := Pin(ctx, uri, cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(stored, source.Env{Changefeed: cf})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	r := &pulling{src: src, log: &memLog{}, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Pull(pctx, pos, r.log) }()
	return r
}

// running fails the test if the reader has stopped.
func (r *pulling) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		t.Fatalf("the reader stopped: %v", err)
	default:
	}
}

// stop stops the reader; it must have run until then.
func (r *pulling) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
