package storage_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// Seed 004 §5.1, the ordered encoder shards: tables written at once, each
// by its own goroutine with random pauses, against a bucket (S3, gofakes3)
// that answers every request after a random delay, so flushes finish in
// no set order. Each table's rows land in its order (verify: 0 out of
// order, every event once), and the tables progress together: between a
// table's first write and its first ack, no other table had three
// quarters of its acks (measured here: at most 9-26 %), which tables
// served one after another (a global head-of-line wait: all of them)
// would show. (Counted in acks, not in time: on a loaded CI machine
// a writer's goroutine started 200 ms late once, and a first flush round
// took half of the run another time, which says nothing about the sink's
// fairness.)
func TestTablesKeepTheirOrderAndProgressTogetherUnderRandomDelays(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("cdc"); err != nil {
		t.Fatal(err)
	}
	s3 := gofakes3.New(backend).Server()
	var rmu sync.Mutex
	rnd := rand.New(rand.NewPCG(1, 2))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rmu.Lock()
		d := time.Duration(rnd.IntN(15)) * time.Millisecond
		rmu.Unlock()
		time.Sleep(d)
		s3.ServeHTTP(w, r)
	}))
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	uri := "s3://cdc/order?endpoint=" + srv.URL + "&use_path_style=true&disable_https=true&region=us-east-1&flush-interval=10m&max-flush-delay=20ms"
	s := open(t, uri)
	const tables = 8
	g := newGen(t, gen.Config{Tables: tables, Keys: 30, Rate: 2000, Seed: 11})
	upTo := model.TsFromMillis(start + 2000)

	type span struct {
		wrote, first time.Time
		acks         int
	}
	type ack struct {
		table string
		at    time.Time
	}
	var mu sync.Mutex
	acked := map[string]*span{}
	var acks []ack // every ack, in the order they came
	var wg sync.WaitGroup
	var failed, total int
	for i, table := range g.TableNames() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := g.Open(model.Span{Table: table}, model.TsFromMillis(start))
			if err != nil {
				t.Error(err)
				return
			}
			pause := rand.New(rand.NewPCG(uint64(i), 3))
			d := table + "-p1.1"
			for {
				evs := sourcetest.Read(t, r, upTo, 10)
				if len(evs) == 0 {
					break
				}
				mu.Lock()
				total += len(evs)
				if acked[table] == nil {
					acked[table] = &span{wrote: time.Now()}
				}
				mu.Unlock()
				err := s.Write(context.Background(), &sink.Batch{Dispatcher: d, Epoch: 1, Events: evs, OnFlushed: func(err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed++
						return
					}
					sp := acked[table]
					now := time.Now()
					if sp.first.IsZero() {
						sp.first = now
					}
					sp.acks++
					acks = append(acks, ack{table, now})
				}})
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(pause.IntN(10)) * time.Millisecond)
			}
			if err := s.Flush(context.Background(), d); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	rep, err := verify.Storage(context.Background(), g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !rep.OK || rep.OutOfOrder != 0 || rep.Duplicates != 0 || rep.Events != uint64(total) || failed != 0 {
		t.Fatalf("verify: %+v (wrote %d, %d failed acks)", rep, total, failed)
	}
	most := 0.0 // the largest share of its acks a table had while another waited
	for table, sp := range acked {
		if sp.first.IsZero() {
			t.Errorf("%s wrote but was never acked", table)
			continue
		}
		before := map[string]int{} // other tables' acks while it waited
		for _, a := range acks {
			if a.table != table && a.at.After(sp.wrote) && a.at.Before(sp.first) {
				before[a.table]++
			}
		}
		for other, n := range before {
			if f := float64(n) / float64(acked[other].acks); f > most {
				most = f
			}
			if 4*n > 3*acked[other].acks {
				t.Errorf("%s waited for its first ack while %s had %d of its %d acks: it waited for other tables", table, other, n, acked[other].acks)
			}
		}
	}
	t.Logf("while a table waited for its first ack, another had at most %.0f%% of its acks", 100*most)
	if len(acked) != tables {
		t.Fatalf("%d of %d tables acked", len(acked), tables)
	}
}
