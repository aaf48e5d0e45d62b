package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/sourcetest"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// TiCDC's date-separator: files go under a date directory of their table
// version, each date numbering its files (and keeping its index) anew,
// and the reader (verify) puts the dates back in order: across midnight,
// nothing is lost or out of order.
func TestDateSeparatorPutsFilesUnderTheirDate(t *testing.T) {
	for sep, days := range map[string][2]string{
		"day":   {"2026-11-25", "2026-11-26"},
		"month": {"2026-11", "2026-12"},
		"year":  {"2026", "2027"},
	} {
		t.Run(sep, func(t *testing.T) {
			dir := t.TempDir()
			uri := "file://" + dir + "?date-separator=" + sep + "&flush-interval=10m&max-flush-delay=0s"
			var clock atomic.Int64
			clock.Store(time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC).Unix())
			if sep == "day" {
				clock.Store(time.Date(2026, 11, 25, 23, 59, 0, 0, time.UTC).Unix())
			}
			if sep == "month" {
				clock.Store(time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC).Unix())
			}
			s, err := storage.OpenWith(context.Background(), uri, quiet(), storage.Env{Now: func() time.Time { return time.Unix(clock.Load(), 0) }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			g := newGen(t, gen.Config{Tables: 1, Keys: 20, Rate: 200, Seed: 5})
			r, _ := g.Open(model.Span{Table: "t0001"}, model.TsFromMillis(start))
			upTo := model.TsFromMillis(start + 3000)
			total, batches := 0, 0
			for {
				evs := sourcetest.Read(t, r, upTo, 50)
				if len(evs) == 0 {
					break
				}
				total += len(evs)
				if err := s.Write(context.Background(), &sink.Batch{Dispatcher: "d1", Epoch: 1, Events: evs}); err != nil {
					t.Fatal(err)
				}
				if batches++; batches%3 == 0 {
					if err := s.Flush(context.Background(), "d1"); err != nil {
						t.Fatal(err)
					}
				}
				if batches == 7 {
					clock.Add(120) // past midnight
				}
			}
			if err := s.Flush(context.Background(), "d1"); err != nil {
				t.Fatal(err)
			}
			var files []string
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, _ error) error {
				if d != nil && !d.IsDir() && strings.Contains(p, "CDC_") {
					rel, _ := filepath.Rel(dir, p)
					files = append(files, rel)
				}
				return nil
			})
			joined := strings.Join(files, "\n")
			for _, day := range days {
				for _, want := range []string{"/" + day + "/CDC_d1_000001.json", "/" + day + "/meta/CDC_d1.index"} {
					if !strings.Contains(joined, want) {
						t.Errorf("no %s among the files:\n%s", want, joined)
					}
				}
			}
			rep, err := verify.Storage(context.Background(), g, uri, upTo)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK || rep.Events != uint64(total) || rep.Duplicates != 0 || rep.OutOfOrder != 0 {
				t.Fatalf("verify across dates: %+v (wrote %d)", rep, total)
			}
		})
	}
}
