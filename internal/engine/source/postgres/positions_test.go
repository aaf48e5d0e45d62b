package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/model"
)

// item is what a stream handed out, as positions: a transaction (its
// commit LSN and position) or a resolved position.
type item struct {
	commit   pglogrepl.LSN
	ts       model.Ts
	resolved bool
	lsn      pglogrepl.LSN // a resolved position's resume LSN
}

// readItems reads until n transactions have come.
func readItems(t *testing.T, st *Stream, n int) []item {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []item
	for got := 0; got < n; {
		it, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("after %d transactions: %v", got, err)
		}
		switch {
		case it.Txn != nil:
			out = append(out, item{commit: it.Txn.CommitLSN, ts: it.Txn.Ts})
			got++
		case it.Part == nil && it.Erase == nil:
			out = append(out, item{ts: it.Resolved, resolved: true, lsn: it.ResolvedLSN})
		}
	}
	return out
}

// Read again from the start, or from a resolved position in the middle,
// the stream gives every transaction the position it had: resolved
// positions come from ticks in the WAL, which a second reading meets at
// the same places. A dispatcher's position therefore means the same
// transactions after its changefeed's reader restarts.
func TestPositionsAreTheSameWhenTheStreamIsReadAgain(t *testing.T) {
	t.Parallel()
	srv, dsn := newDB(t, `CREATE TABLE t (id int4 PRIMARY KEY, v int4)`)
	st, cfg, up := open(t, dsn+"&tables=t")
	if !st.ticks {
		t.Skip("PostgreSQL before 14 resolves from probes, not ticks")
	}
	const n = 30
	// Transactions spread over a few seconds, ticks among them.
	go func() {
		for i := 0; i < n; i++ {
			if _, err := srv.Psql(context.Background(), dbOf(dsn), fmt.Sprintf(`INSERT INTO t VALUES (%d, 0)`, i)); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	first := readItems(t, st, n)
	_ = st.Close()
	positions := map[pglogrepl.LSN]model.Ts{}
	var mid *item // a resolved position with transactions before and after it
	seen := 0
	for i := range first {
		if !first[i].resolved {
			positions[first[i].commit] = first[i].ts
			seen++
			continue
		}
		if mid == nil && seen > 0 && seen <= n-3 {
			mid = &first[i]
		}
	}
	if mid == nil {
		t.Fatalf("no resolved position among %d transactions: %+v", n, first)
	}
	tables := map[string]TableState{}
	for name, def := range up.Defs {
		tables[name] = TableState{Def: def}
	}
	check := func(what string, from pglogrepl.LSN, last model.Ts, want int) {
		again, err := OpenStream(context.Background(), cfg, from, last, tables, false, "")
		for deadline := time.Now().Add(15 * time.Second); errors.Is(err, errSlotInUse) && time.Now().Before(deadline); {
			// The stream before was closed; its walsender may not have
			// exited yet (a loaded machine).
			time.Sleep(100 * time.Millisecond)
			again, err = OpenStream(context.Background(), cfg, from, last, tables, false, "")
		}
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		for _, it := range readItems(t, again, want) {
			if !it.resolved && positions[it.commit] != it.ts {
				t.Fatalf("%s: the transaction committed at %s is at %v, was at %v", what, it.commit, it.ts, positions[it.commit])
			}
		}
	}
	check("from the start", up.StartLSN, 0, n)
	after := 0
	for _, it := range first {
		if !it.resolved && it.commit > mid.lsn {
			after++
		}
	}
	check("from a resolved position", mid.lsn, mid.ts, after)
}
