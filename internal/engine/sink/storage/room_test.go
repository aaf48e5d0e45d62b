package storage

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// Writers waiting for room are let in in their order of arrival, each as
// soon as it fits; one that gives up leaves its place to the next; a
// writer larger than the room goes in when it is empty.
func TestRoomLetsWritersInInOrder(t *testing.T) {
	var waits atomic.Int32
	r := newRoom(100, func() { waits.Add(1) })
	ctx := context.Background()
	if err := r.take(ctx, 80, nil); err != nil {
		t.Fatal(err)
	}
	in := make(chan int, 10)
	start := func(id int, n int64, ctx context.Context) chan error {
		done := make(chan error, 1)
		go func() {
			err := r.take(ctx, n, nil)
			if err == nil {
				in <- id
			}
			done <- err
		}()
		// Queued before the next one starts.
		for deadline := time.Now().Add(5 * time.Second); r.waiting() < id; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("writer %d never queued", id)
			}
		}
		return done
	}
	cctx, cancel := context.WithCancel(ctx)
	first := start(1, 30, ctx)
	second := start(2, 50, cctx)
	third := start(3, 10, ctx) // fits now, but waits behind the others
	select {
	case id := <-in:
		t.Fatalf("writer %d went in ahead of its turn", id)
	case <-time.After(50 * time.Millisecond):
	}
	cancel() // the second gives up: its place goes to the next
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled writer: %v", err)
	}
	r.give(10) // 70 held: the first (30) fits, then nothing more
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-third:
		t.Fatalf("the third went in without room: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.give(30) // 70 held: the third (10) fits
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	if a, b := <-in, <-in; a != 1 || b != 3 {
		t.Fatalf("let in %d then %d; want 1 then 3", a, b)
	}
	if got := r.held(); got != 80 {
		t.Fatalf("held %d; want 80", got)
	}
	if n := waits.Load(); n != 3 {
		t.Fatalf("onWait called %d times; want once per writer that waited (3)", n)
	}
	// Larger than the room: in once it is empty.
	big := make(chan error, 1)
	go func() { big <- r.take(ctx, 500, nil) }()
	for r.waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	r.give(80)
	if err := <-big; err != nil || r.held() != 500 {
		t.Fatalf("the large writer: %v, held %d", err, r.held())
	}
	// An abort ends a wait.
	abort := make(chan struct{})
	aborted := make(chan error, 1)
	go func() { aborted <- r.take(ctx, 1, abort) }()
	for r.waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(abort)
	if err := <-aborted; !errors.Is(err, errSinkClosed) || r.waiting() != 0 {
		t.Fatalf("an aborted wait: %v, %d waiting", err, r.waiting())
	}
}
