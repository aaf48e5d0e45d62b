package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// An idle stream is resolved by its own ticks several times a second (it
// was once a second, with the status update); a stream whose
// transactions keep committing is resolved by them and writes no ticks
// into the WAL, where every slot of the database would decode them.
func TestAStreamTicksOnlyWhenNothingElseResolvesIt(t *testing.T) {
	t.Parallel()
	_, dsn := newDB(t, `CREATE TABLE public.t (id int4 PRIMARY KEY, v int4)`)
	st, _, _ := open(t, dsn+"&tables=public.t")
	if !st.ticks {
		t.Skip("PostgreSQL before 14 resolves an idle stream by probes, not ticks")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Idle: over two status intervals a tick a status update would
	// resolve the stream three times at most.
	resolved := 0
	last := time.Now() // when Next last returned
	for began := time.Now(); time.Since(began) < 2*statusInterval; {
		it, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = time.Now()
		if it.Txn != nil {
			t.Fatalf("a transaction on an idle database: %+v", it.Txn)
		}
		if it.Resolved != 0 {
			resolved++
		}
	}
	if resolved <= 3 {
		t.Fatalf("an idle stream was resolved %d times in %v; its ticks come every %v", resolved, 2*statusInterval, tickEvery)
	}

	// Busy: a commit every few milliseconds. A tick may be written only
	// in a call to Next that waited tickEvery with nothing handed out (a
	// stall of this machine); none otherwise.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The writer ends before its connection closes, however the test ends.
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			if _, err := conn.Exec(wctx, `INSERT INTO public.t VALUES ($1, $1)`, i); err != nil && wctx.Err() == nil {
				t.Error(err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	// The first wait counts from the idle phase's last item: connecting
	// the writer took a while, and a tick may be due at once.
	commits, ticks, slow := 0, 0, 0
	prev := last
	for began := time.Now(); time.Since(began) < 2*statusInterval; {
		lsn := st.tickLSN
		it, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waited := time.Since(prev)
		prev = time.Now()
		if it.Txn != nil {
			commits++
		}
		if st.tickLSN != lsn {
			ticks++
			if waited < tickEvery {
				t.Fatalf("a tick written %v after the stream last handed out a position, while transactions committed", waited)
			}
		}
		if waited >= tickEvery {
			slow++
		}
	}
	stop()
	wg.Wait()
	if commits < 10 {
		t.Fatalf("only %d transactions arrived in %v", commits, 2*statusInterval)
	}
	t.Logf("idle: resolved %d times; busy: %d transactions, %d ticks, %d waits of %v or more", resolved, commits, ticks, slow, tickEvery)
}
