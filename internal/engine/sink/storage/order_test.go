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
// order, every event once), and the tables progress together: every
// table's first ack comes within half of the time acks took after its
// own first write, which tables served one after another (a global
// head-of-line wait) would not. (Measured from the table's own first
// write, not from the first ack of all: on a loaded CI machine a
// writer's goroutine started 200 ms late once, which says nothing about
// the sink.)
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

	type span struct{ wrote, first, last time.Time }
	var mu sync.Mutex
	acked := map[string]*span{}
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
					if sp.first.IsZero() {
						sp.first = time.Now()
					}
					sp.last = time.Now()
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
	var begin, end time.Time
	for _, sp := range acked {
		if sp.first.IsZero() {
			continue
		}
		if begin.IsZero() || sp.first.Before(begin) {
			begin = sp.first
		}
		if sp.last.After(end) {
			end = sp.last
		}
	}
	half := end.Sub(begin) / 2
	for table, sp := range acked {
		if sp.first.IsZero() {
			t.Errorf("%s wrote but was never acked", table)
		} else if waited := sp.first.Sub(sp.wrote); waited > half {
			t.Errorf("%s's first ack came %v after its first write, past half of the %v acks took: it waited for other tables",
				table, waited, end.Sub(begin))
		}
	}
	if len(acked) != tables {
		t.Fatalf("%d of %d tables acked", len(acked), tables)
	}
}
