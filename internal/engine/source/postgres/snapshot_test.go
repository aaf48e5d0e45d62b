package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The initial snapshot under writes, copied by partitions: 10,000 rows
// exist, the table is cut into three partitions that copy their own
// ranges (about five chunks each), a workload updates, deletes and
// inserts rows of every chunk meanwhile, one partition is moved (stopped
// and started again from where it stood) and one is split while they
// copy. The rows the partitions delivered, applied in order, equal the
// table afterwards; no row was copied twice; every partition's copy ends
// done.
func TestPartitionsCopyTheirRangesConsistentWithTheStream(t *testing.T) {
	t.Parallel()
	snapshotUnderWrites(t, false)
}

// A column added while the partitions copy: chunks whose window the
// change falls in are read again under the new schema. The rows still
// equal the table, and the last carry the new column.
func TestASchemaChangeDuringTheSnapshot(t *testing.T) {
	t.Parallel()
	snapshotUnderWrites(t, true)
}

func snapshotUnderWrites(t *testing.T, ddl bool) {
	srv, dsn := newDB(t, `CREATE TABLE t (id int8 PRIMARY KEY, v text, n int4);
		INSERT INTO t SELECT g, md5(g::text), 0 FROM generate_series(1, 10000) g`)
	ctx := context.Background()
	cf := model.ChangefeedID("snap")
	if ddl {
		cf = "snap_ddl" // the tests run at once: a slot name of its own
	}
	rig := startCopyRig(t, dsn+"&tables=t&chunk-rows=700", cf)
	key := func(id string) string {
		k, err := model.EncodeKeyValues("int8", []string{id})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	start := rig.start
	// a and b pause mid-copy (after two chunks) until they are moved and
	// split; c copies on.
	a := rig.runHeld(model.Span{Table: "public.t", End: key("3000"), Key: "int8"}, start, model.CopyProgress{}, 1000)
	b := rig.runHeld(model.Span{Table: "public.t", Start: key("3000"), End: key("7000"), Key: "int8"}, start, model.CopyProgress{}, 1000)
	c := rig.run(model.Span{Table: "public.t", Start: key("7000"), Key: "int8"}, start, model.CopyProgress{})

	// The workload, while the partitions copy.
	next := 20001
	stop := writeUntil(t, dsn, 3, func(conn *pgx.Conn, rng *rand.Rand) error {
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
		return err
	})

	// A move of a while copying: stopped where it stands, started again
	// from there. A split of b while copying: its progress cut at 5000.
	parts := []*partition{c}
	moved := rig.whenCopying(a)
	movedAt, copied := moved.stopAt(t)
	parts = append(parts, moved, rig.run(moved.span, movedAt, copied))
	if ddl {
		psql(t, srv, dsn, `ALTER TABLE t ADD COLUMN w int4 DEFAULT 5`)
	}
	split := rig.whenCopying(b)
	at, copied := split.stopAt(t)
	lowCopy, upCopy := copied.Cut(key("5000"))
	low, up := split.span, split.span
	low.End, up.Start = key("5000"), key("5000")
	parts = append(parts, split, rig.run(low, at, lowCopy), rig.run(up, at, upCopy))
	t.Logf("moved at %v after copying %d rows; split at %v after copying %d rows (%+v, %+v)", movedAt, moved.copiedRows(), at, split.copiedRows(), lowCopy, upCopy)

	for _, p := range parts {
		p.waitDone(t)
	}
	stop()
	// A last change, to know when the stream has delivered everything.
	psql(t, srv, dsn, `INSERT INTO t VALUES (999999, 'last', 0)`)
	last := c // the partition of key 999999
	for deadline := time.Now().Add(30 * time.Second); !last.has("999999"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last change did not arrive")
		}
	}
	var evs []source.Event
	var from []int // which partition read each event, for a failure's story
	for i, p := range parts {
		read := p.stopped(t)
		evs = append(evs, read...)
		for range read {
			from = append(from, i)
		}
	}
	rig.stop(t)
	order := make([]int, len(evs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return evs[order[i]].CommitTs < evs[order[j]].CommitTs })
	sorted := make([]source.Event, len(evs))
	parted := make([]int, len(evs))
	for i, j := range order {
		sorted[i], parted[i] = evs[j], from[j]
	}
	evs = sorted

	rows := map[string]string{}
	copies := map[string]int{}
	for _, e := range evs {
		if e.Kind != source.KindDML {
			continue
		}
		switch k := textKey(&e); e.Op {
		case source.OpDelete:
			delete(rows, k)
		default:
			if id, _ := strconv.Atoi(k); e.Op == source.OpInsert && id <= 10000 {
				// Only the copy inserts the keys that existed before
				// (the workload inserts new ones, which a chunk read
				// after them copies again, as DBLog does): once each.
				copies[k]++
			}
			rows[k] = e.New[1].Text + "/" + e.New[2].Text
		}
	}
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
	missing, extra, different, twice := 0, 0, 0, 0
	var wrong []string
	for k, v := range want {
		g, ok := rows[k]
		switch {
		case !ok:
			missing++
			wrong = append(wrong, k)
		case g != v:
			different++
			wrong = append(wrong, k)
		}
	}
	for k := range rows {
		if _, ok := want[k]; !ok {
			extra++
			wrong = append(wrong, k)
		}
	}
	// A wrong row's story: every event of its key, with the partition
	// that read it (0 is c; 1, 2 the moved partition before and after;
	// 3, 4, 5 the split one and its halves).
	sort.Strings(wrong)
	for _, k := range wrong[:min(len(wrong), 3)] {
		t.Logf("row %s: upstream %q", k, want[k])
		for i := range evs {
			e := &evs[i]
			if e.Kind == source.KindDDL {
				t.Logf("  partition %d: DDL at %v", parted[i], e.CommitTs)
			} else if textKey(e) == k {
				t.Logf("  partition %d: %v at %v: %v", parted[i], e.Op, e.CommitTs, e.New)
			}
		}
	}
	for _, n := range copies {
		if n > 1 {
			twice++
		}
	}
	if missing+extra+different+twice > 0 {
		t.Logf("%d transactions a chunk's read missed before its low watermark", rig.src.missed.Load())
		t.Fatalf("rebuilt from the partitions: %d missing, %d extra, %d different of %d rows; %d inserted twice", missing, extra, different, len(want), twice)
	}
	if ddl {
		// Rows copied or written after the change carry the new column.
		e := evs[len(evs)-1]
		if len(e.New) != 4 || e.New[3].Text != "0" && e.New[3].Text != "5" {
			t.Fatalf("the last row %+v does not carry the added column", e.New)
		}
	}
	var total int64
	for _, p := range parts[len(parts)-4:] {
		total += p.copiedRows()
	}
	t.Logf("%d rows equal after a snapshot by partitions under writes; the last four partitions' progress counts %d rows; %d transactions a chunk's read missed", len(want), total, rig.src.missed.Load())
}

// A table without a primary key is copied under a SHARE lock, in chunks
// from one cursor, by its one partition, while a workload writes to it
// (its writes wait for the copy): the rows delivered, applied in order
// as a multiset, equal the table afterwards, equal rows counted.
func TestAKeylessTableIsCopiedFromOneSnapshot(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE k (kind text, n int4);
		ALTER TABLE k REPLICA IDENTITY FULL;
		INSERT INTO k SELECT 'k' || (g % 50), 0 FROM generate_series(1, 3000) g`)
	ctx := context.Background()
	// Five chunks under one lock.
	rig := startCopyRig(t, dsn+"&tables=k&chunk-rows=700", "keyless")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(5))
	// Changes before the partition starts are in the copy: the stream's
	// rows of them are dropped.
	write := func(n int) {
		for i := 0; i < n; i++ {
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
	}
	write(100)
	p := rig.run(model.Span{Table: "public.k", Key: model.NoKey}, rig.start, model.CopyProgress{})
	write(300)
	p.waitDone(t)
	psql(t, srv, dsn, `INSERT INTO k VALUES ('last', -1)`)
	image := func(vs []source.Value) string { return vs[0].Text + "/" + vs[1].Text }
	arrived := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := len(p.evs)
		return n > 0 && p.evs[n-1].New != nil && image(p.evs[n-1].New) == "last/-1"
	}
	for deadline := time.Now().Add(60 * time.Second); !arrived(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last change did not arrive")
		}
	}
	evs := p.stopped(t)
	rig.stop(t)
	got := map[string]int{}
	for _, e := range evs {
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
	want := map[string]int{}
	out, err := srv.Psql(ctx, dbOf(dsn), `SELECT kind || '/' || n FROM k`)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range splitLines(out) {
		want[line]++
	}
	if want["last/-1"] != 1 || got["last/-1"] != 1 {
		t.Fatalf("the last row: %d upstream, %d delivered", want["last/-1"], got["last/-1"])
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

// copyRig is a changefeed's reader pulling into an event log, and
// partitions reading it as dispatchers do.
type copyRig struct {
	// count: partitions count the events they read instead of keeping
	// them (benchmarks).
	count  bool
	src    *Source
	log    *eventlog.Log
	start  model.Ts
	cancel context.CancelFunc
	done   chan error
	// closing is set when the test ends, before the log closes: a
	// partition a failed test left running then ends quietly instead of
	// panicking on the closed log, which hid the test's own failure.
	closing atomic.Bool
}

func startCopyRig(t testing.TB, uri string, cf model.ChangefeedID) *copyRig {
	t.Helper()
	return startCopyRigWith(t, uri, cf, nil)
}

// startCopyRigWith is startCopyRig with the source set up by set before
// it pulls.
func startCopyRigWith(t testing.TB, uri string, cf model.ChangefeedID, set func(*Source)) *copyRig {
	t.Helper()
	ctx := context.Background()
	stored, pos, err := Pin(ctx, uri, cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return pullFrom(t, stored, pos, cf, set)
}

// pullFrom starts a copy rig's reader of a pinned changefeed (its stored
// URI) at a resume point, into a new log.
func pullFrom(t testing.TB, stored string, pos source.Position, cf model.ChangefeedID, set func(*Source)) *copyRig {
	t.Helper()
	ctx := context.Background()
	cfg, err := ParseURI(stored)
	if err != nil {
		t.Fatal(err)
	}
	log, err := eventlog.Open("", cfg.Start, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(stored, source.Env{Changefeed: cf, Logs: eventlog.Local{Log: log}})
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(src)
	}
	pctx, cancel := context.WithCancel(ctx)
	rig := &copyRig{src: src, log: log, start: cfg.Start, cancel: cancel, done: make(chan error, 1)}
	go func() { rig.done <- src.Pull(pctx, pos, log) }()
	t.Cleanup(func() {
		rig.closing.Store(true)
		cancel()
		_ = src.Close()
		_ = log.Close()
	})
	return rig
}

func (rig *copyRig) stop(t testing.TB) {
	t.Helper()
	rig.cancel()
	if err := <-rig.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// partition reads a span as a dispatcher does: up to the table's next
// schema change, which it passes, steps over and keeps with its rows.
type partition struct {
	span   model.Span
	r      source.Reader
	mu     sync.Mutex
	evs    []source.Event
	copied model.CopyProgress
	n      int // events read
	begun  int // copies begun again after one was done
	// holdAt, when above 0, pauses the reads once that many rows are
	// copied (between chunks), so a test can act while the copy is
	// surely under way however fast the machine copies; release resumes.
	holdAt int64
	quit   chan struct{}
	done   chan struct{}
	// finished is closed when the copy is first seen done, so a
	// benchmark's clock stops then, not at its next poll.
	finished chan struct{}
}

func (rig *copyRig) run(span model.Span, from model.Ts, copied model.CopyProgress) *partition {
	return rig.runHeld(span, from, copied, 0)
}

// runHeld runs a partition that pauses once holdAt rows are copied.
func (rig *copyRig) runHeld(span model.Span, from model.Ts, copied model.CopyProgress, holdAt int64) *partition {
	r, err := rig.src.OpenCopying(span, from, copied)
	if err != nil {
		panic(err)
	}
	p := &partition{span: span, r: r, copied: copied, holdAt: holdAt, quit: make(chan struct{}), done: make(chan struct{}), finished: make(chan struct{})}
	if copied.Done {
		close(p.finished)
	}
	go func() {
		defer close(p.done)
		if c, ok := r.(source.Closer); ok {
			defer c.Close()
		}
		for {
			select {
			case <-p.quit:
				if pt, ok := r.(source.Parted); !ok || !pt.Inside() {
					return
				}
			default:
			}
			if p.held() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			upTo := model.Ts(math.MaxInt64 >> 1)
			ddls := rig.src.DDLs(span.Table, r.Position(), upTo)
			if len(ddls) > 0 {
				upTo = ddls[0].CommitTs - 1
			}
			// As a dispatcher does: the log's change signal taken before
			// the read, waited on (at most a while) when it read nothing.
			var changed <-chan struct{}
			if n, ok := r.(source.Notifier); ok {
				changed = n.Changed()
			}
			evs, err := r.Read(context.Background(), upTo, 256)
			if err != nil {
				if rig.closing.Load() {
					return // the test ended (failed) with the partition running
				}
				panic(err) // the log is local: a read cannot fail
			}
			p.mu.Lock()
			p.n += len(evs)
			if !rig.count {
				p.evs = append(p.evs, evs...)
			}
			if c, ok := r.(source.Copying); ok {
				// Done once: a copy done may begin again (a partition
				// attached to the table).
				was := p.copied.Done
				if p.copied = c.Copied(); was && !p.copied.Done {
					p.begun++
				}
				if p.copied.Done {
					select {
					case <-p.finished:
					default:
						close(p.finished)
					}
				}
			}
			p.mu.Unlock()
			if len(ddls) > 0 && r.Position() >= upTo {
				p.mu.Lock()
				p.evs = append(p.evs, ddls[0])
				p.mu.Unlock()
				r.(source.DDLStepper).StepOver(ddls[0].CommitTs)
				continue
			}
			if len(evs) == 0 {
				select {
				case <-changed:
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
	}()
	return p
}

// held says the partition pauses: it copied holdAt rows, not all, and
// no chunk's rows are half returned.
func (p *partition) held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holdAt <= 0 || p.copied.Done || p.copied.Rows < p.holdAt {
		return false
	}
	pt, ok := p.r.(source.Parted)
	return !ok || !pt.Inside()
}

// release resumes a held partition.
func (p *partition) release() {
	p.mu.Lock()
	p.holdAt = 0
	p.mu.Unlock()
}

// whenCopying returns p once it has copied some of its range, not all.
func (rig *copyRig) whenCopying(p *partition) *partition {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		c := p.copied
		p.mu.Unlock()
		if c.To != "" && !c.Done {
			return p
		}
	}
	panic("the partition did not start copying")
}

// stopAt stops the partition gracefully: where it stands, and its copy's
// progress there.
func (p *partition) stopAt(t *testing.T) (model.Ts, model.CopyProgress) {
	close(p.quit)
	<-p.done
	return p.r.Position(), p.r.(source.Copying).Copied()
}

// stopped stops the partition (if it runs) and returns what it read.
func (p *partition) stopped(t testing.TB) []source.Event {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evs
}

func (p *partition) copiedRows() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.copied.Rows
}

// waitDone waits until the partition's copy is done, or it was stopped.
func (p *partition) waitDone(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
	case <-p.finished:
	case <-time.After(90 * time.Second):
		p.mu.Lock()
		c := p.copied
		p.mu.Unlock()
		t.Fatalf("the copy of %s did not finish: %+v", p.span, c)
	}
}

// has says a row with this key (text form) was read.
func (p *partition) has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.evs {
		if p.evs[i].Kind == source.KindDML && textKey(&p.evs[i]) == key {
			return true
		}
	}
	return false
}

func dbOf(dsn string) string {
	if !strings.Contains(dsn, "tables=") {
		dsn += "&tables=x"
	}
	cfg, _ := ParseURI(dsn)
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

// A column added to a table nobody writes, while its partition copies:
// the catalog has the column, the stream (which describes a table's
// columns only with its next row) does not yet. The copy does not wait
// for a row: chunks read after the change leave the column out, and the
// schema change, when a row brings it, gives it to the rows before.
func TestACopyDoesNotWaitForAQuietTablesNewColumns(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE q (id int4 PRIMARY KEY, v text);
		INSERT INTO q SELECT g, 'x' FROM generate_series(1, 3000) g`)
	rig := startCopyRig(t, dsn+"&tables=q&chunk-rows=500", "quiet")
	p := rig.runHeld(model.Span{Table: "public.q", Key: "int4"}, rig.start, model.CopyProgress{}, 1000)
	rig.whenCopying(p)
	psql(t, srv, dsn, `ALTER TABLE q ADD COLUMN w int4 DEFAULT 5`)
	p.release()
	p.waitDone(t) // within seconds: no chunk is read again and again
	psql(t, srv, dsn, `INSERT INTO q VALUES (5000, 'y', 6)`)
	for deadline := time.Now().Add(30 * time.Second); !p.has("5000"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the row written after the change did not arrive")
		}
	}
	keys := map[string]int{}
	var ddl *source.Event
	for _, e := range p.stopped(t) {
		switch {
		case e.Kind == source.KindDDL:
			ddl = &e
		case len(e.New) != 2 && textKey(&e) != "5000":
			t.Fatalf("a row before the schema change has columns %v", e.New)
		}
		keys[textKey(&e)]++
	}
	if ddl == nil || !strings.Contains(ddl.Statement, `ADD COLUMN "w" int4 DEFAULT '5'`) {
		t.Fatalf("the schema change: %+v", ddl)
	}
	if len(keys) != 3001+1 { // the rows, the new one, and the DDL's empty key
		t.Fatalf("%d keys arrived", len(keys))
	}
	rig.stop(t)
}

// progress is the partition's copy progress as last read.
func (p *partition) progress() model.CopyProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.copied
}
