package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/bucket/buckettest"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// A bucket that is full for a moment (uploads refused with MinIO's 507)
// costs a delay, not a resumed partition: the refused uploads are tried
// again under the same names within retry-timeout, the flush succeeds,
// and every event is in the bucket once. With retry-timeout=0 the same
// moment fails the flush, as before.
func TestAFullBucketIsWaitedOutNotReplayed(t *testing.T) {
	b := buckettest.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		params string
		fails  bool
	}{{"flush-interval=50ms&protocol=csv", false}, {"flush-interval=50ms&protocol=csv&retry-timeout=0s", true}} {
		prefix := map[bool]string{false: "waited", true: "unretried"}[tc.fails]
		uri := b.URI(prefix, tc.params)
		s := open(t, uri)
		g := newGen(t, gen.Config{Tables: 1, Keys: 40, Rate: 400, Seed: 7})
		table := g.TableNames()[0]
		upTo := model.TsFromMillis(start + 2000)
		refusedBefore := b.Refused.Load()
		b.Full.Store(true)
		var a acks
		if tc.fails {
			// Full until the flush: on a loaded machine feeding once
			// outlasted the moment. The failure shows at a timed
			// flush (the next write says so) or at this one.
			_, err := feedUntilError(t, s, g, model.Span{Table: table}, table+"-p1.1", upTo, &a, 0)
			if err == nil {
				err = s.Flush(ctx, table+"-p1.1")
			}
			b.Full.Store(false)
			if err == nil && a.failed.Load() == 0 {
				t.Fatalf("retry-timeout=0: the flush succeeded although the bucket refused %d uploads", b.Refused.Load()-refusedBefore)
			}
			continue
		}
		time.AfterFunc(1500*time.Millisecond, func() { b.Full.Store(false) })
		total := feed(t, s, g, model.Span{Table: table}, table+"-p1.1", upTo, &a)
		err := s.Flush(ctx, table+"-p1.1")
		for b.Full.Load() {
			time.Sleep(50 * time.Millisecond)
		}
		refused := b.Refused.Load() - refusedBefore
		if err != nil || a.failed.Load() != 0 {
			t.Fatalf("the flush failed (%v, %d batches failed) although the bucket had room again within the retry timeout", err, a.failed.Load())
		}
		if err := s.WriteCheckpoint(ctx, upTo); err != nil {
			t.Fatal(err)
		}
		rep, err := verify.Storage(ctx, g, uri, upTo)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK || rep.Duplicates != 0 || rep.Events != uint64(total) || refused == 0 {
			t.Fatalf("after a full bucket (%d uploads refused): %+v (wrote %d)", refused, rep, total)
		}
		t.Logf("%d events written once after %d refused uploads", rep.Events, refused)
	}
}

// A new dispatcher's first flush into a directory reads its index (to go
// on numbering its files); a store that cannot serve that read for a
// moment is waited out within retry-timeout, as a refused upload is,
// not failed at once (which the dispatcher's successor replays).
func TestAnIndexUnreadableForAMomentIsWaitedOut(t *testing.T) {
	b := buckettest.Start(t)
	ctx := context.Background()
	uri := b.URI("unreadable", "flush-interval=50ms&protocol=csv")
	s := open(t, uri)
	g := newGen(t, gen.Config{Tables: 1, Keys: 40, Rate: 400, Seed: 7})
	table := g.TableNames()[0]
	upTo := model.TsFromMillis(start + 2000)
	b.Unreadable.Store(true)
	time.AfterFunc(3*time.Second, func() { b.Unreadable.Store(false) })
	var a acks
	total := feed(t, s, g, model.Span{Table: table}, table+"-p1.1", upTo, &a)
	err := s.Flush(ctx, table+"-p1.1")
	if err != nil || a.failed.Load() != 0 {
		t.Fatalf("the flush failed (%v, %d batches failed) although the index could be read again within the retry timeout", err, a.failed.Load())
	}
	for b.Unreadable.Load() {
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.WriteCheckpoint(ctx, upTo); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Storage(ctx, g, uri, upTo)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Duplicates != 0 || rep.Events != uint64(total) {
		t.Fatalf("after an unreadable moment: %+v (wrote %d)", rep, total)
	}
}
