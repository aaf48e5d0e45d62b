package coordinator

import (
	"context"
	"testing"
	"time"
)

// A change of a changefeed's tables waits for the one under way, and the
// changefeed's lock is forgotten once no one holds or waits for it.
func TestAChangefeedsTableLockIsForgottenWhenFree(t *testing.T) {
	c := &Coordinator{}
	ctx := context.Background()
	unlock, err := c.lockTables(ctx, "cf")
	if err != nil {
		t.Fatal(err)
	}
	// A second change gives up when its context ends, and is not counted.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.lockTables(short, "cf"); err == nil {
		t.Fatal("a second change of cf's tables took the lock while the first held it")
	}
	got := make(chan func())
	go func() {
		u, err := c.lockTables(ctx, "cf")
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("a change of cf's tables ran while another held the lock")
	case <-time.After(50 * time.Millisecond):
	}
	other, err := c.lockTables(ctx, "other") // another changefeed's change does not wait
	if err != nil {
		t.Fatal(err)
	}
	other()
	unlock()
	(<-got)()
	if n := c.retabling.count(); n != 0 {
		t.Fatalf("%d changefeeds' locks kept after every change ended", n)
	}
}
