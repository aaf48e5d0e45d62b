package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The tenure answers from the clock, so a process that wakes from a
// freeze longer than its TTL is refused before anything has noticed the
// lost session; a renewal that is merely late is waited for.
func TestTenureAnswersFromTheClock(t *testing.T) {
	const ttl = 2 * time.Second
	ctx := context.Background()

	fresh := newTenure(ttl, time.Now())
	if !fresh.Valid() || fresh.Hold(ctx) != nil {
		t.Fatal("a lease renewed just now is not held")
	}

	// Woken after a freeze of 3 s: the lease may have expired.
	frozen := newTenure(ttl, time.Now().Add(-3*time.Second))
	err := frozen.Hold(ctx)
	if err == nil || frozen.Valid() || !strings.Contains(err.Error(), "past its TTL") {
		t.Fatalf("a lease last renewed 3 s ago with a 2 s TTL: %v", err)
	}

	// A renewal late (within the margin, before the end): Hold waits for
	// it and then holds.
	late := newTenure(ttl, time.Now().Add(-ttl+ttl/8))
	if late.Valid() {
		t.Fatal("valid within the margin of the lease's end")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		late.renew(time.Now())
	}()
	if err := late.Hold(ctx); err != nil {
		t.Fatalf("a late renewal: %v", err)
	}
	if !late.Valid() {
		t.Fatal("not valid after its renewal")
	}

	// Late and never renewed: Hold gives up at the lease's end.
	lapsed := newTenure(ttl, time.Now().Add(-ttl+ttl/8))
	if err := lapsed.Hold(ctx); err == nil {
		t.Fatal("held past the lease's end without a renewal")
	}

	ended := newTenure(ttl, time.Now())
	ended.end()
	if err := ended.Hold(ctx); err == nil || ended.Valid() {
		t.Fatal("held after the keepalive ended")
	}
}

// A member's tenure follows its real etcd lease: renewed for longer than
// the TTL while the session lives, lost once the lease is revoked.
func TestAMembersTenureFollowsItsLease(t *testing.T) {
	_, cli := etcdtest.Start(t)
	store := meta.NewStore(cli, "test")
	m, err := Join(context.Background(), store, model.NodeInfo{ID: "capture-1", Address: "capture-1"}, 2*time.Second, meta.Previous{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Abandon()
	deadline := time.Now().Add(3 * time.Second) // past the TTL
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := m.Tenure().Hold(ctx)
		cancel()
		if err != nil {
			t.Fatalf("a live session's tenure: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(m.Info().Incarnation)); err != nil {
		t.Fatal(err)
	}
	// Revoked: no renewal comes; the tenure ends with the keepalive or,
	// at the latest, at the lease's end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for m.Tenure().Hold(ctx) == nil {
		if ctx.Err() != nil {
			t.Fatal("the tenure of a revoked lease still holds")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m.Tenure().Valid() {
		t.Fatal("valid after the lease was revoked")
	}
}
