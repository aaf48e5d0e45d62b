package bucket

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Writers waiting at once share syncs, and none returns before a sync
// that began after it asked has ended: a sync already under way when a
// writer asks may have missed its writes.
func TestAGroupSyncServesItsWritersWithSyncsBegunAfterThem(t *testing.T) {
	var starts, calls atomic.Int64
	var newestDone atomic.Int64 // the start number of the newest sync ended
	g := &groupSync{sync: func() error {
		n := starts.Add(1)
		calls.Add(1)
		time.Sleep(5 * time.Millisecond)
		for {
			d := newestDone.Load()
			if n <= d || newestDone.CompareAndSwap(d, n) {
				return nil
			}
		}
	}}
	const writers = 200
	var wg sync.WaitGroup
	var early atomic.Int64
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%20) * time.Millisecond)
			asked := starts.Load()
			if err := g.wait(context.Background()); err != nil {
				t.Error(err)
			}
			if newestDone.Load() <= asked {
				early.Add(1)
			}
		}()
	}
	wg.Wait()
	if early.Load() != 0 {
		t.Fatalf("%d writers returned before a sync begun after they asked ended", early.Load())
	}
	if n := calls.Load(); n >= writers/4 {
		t.Fatalf("%d writers made %d syncs; want them shared", writers, n)
	}
	t.Logf("%d writers, %d syncs", writers, calls.Load())
}

// A sync that failed fails every later writer too: the failed write back
// may have been another writer's, reported once, to the first sync after
// it.
func TestAGroupSyncThatFailedFailsEveryLaterWriter(t *testing.T) {
	var calls atomic.Int64
	g := &groupSync{sync: func() error {
		if calls.Add(1) == 1 {
			return errors.New("EIO")
		}
		return nil
	}}
	for i := range 3 {
		if err := g.wait(context.Background()); err == nil || err.Error() != "EIO" {
			t.Fatalf("wait %d after a failed sync: %v; want EIO", i, err)
		}
	}
}
