package eventlog

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// closes says whether ch is closed within d.
func closes(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// A partition waiting on a log whose reader runs on another node is woken
// when that log resolves further (a long poll through the transport), not
// before; a log its node no longer serves is not asked about in a loop;
// when the reader moves, the log on its new node wakes it, though its
// positions start lower; after Close nothing is watched.
func TestARemoteLogWakesItsWaitingPartitionsWhenItResolves(t *testing.T) {
	const cf = model.ChangefeedID("cf")
	open := func(start model.Ts) *Log {
		l, err := Open(t.TempDir(), start, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	hub := transport.NewHub()
	var waits atomic.Int64
	serve := func(node model.NodeID) *Server {
		srv := NewServer()
		tr := hub.Join(node)
		srv.Register(tr)
		tr.Respond(TopicWait, func(ctx context.Context, m transport.Message) (any, error) {
			waits.Add(1)
			return srv.onWait(ctx, m)
		})
		return srv
	}
	s1, s3 := serve("n1"), serve("n3")
	l1 := open(5)
	s1.Put(cf, l1)
	var at atomic.Value
	at.Store(model.NodeID("n1"))
	far := NewClient(hub.Join("n2"), func(model.ChangefeedID) (model.NodeID, bool) { return at.Load().(model.NodeID), true }, "n2", NewServer())
	defer far.Close()

	// The first answer tells the log's position (a wake with nothing
	// new, once); then nothing changes, and nothing wakes.
	if !closes(far.Changed(cf), 5*time.Second) {
		t.Fatal("the first wait did not answer with the log's position")
	}
	ch := far.Changed(cf)
	if ch == nil {
		t.Fatal("no channel to wait on for a remote log")
	}
	if closes(ch, 300*time.Millisecond) {
		t.Fatal("woken though the log did not change")
	}
	if err := l1.Append([]source.Event{row(10, "a", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	l1.Resolve(20)
	if !closes(ch, 5*time.Second) {
		t.Fatal("not woken when the remote log resolved to 20")
	}

	// The reader moves to n3, whose log is resolved to 7 only: its
	// node's positions count, not the 20 seen on n1.
	s1.Remove(cf, l1)
	before := waits.Load()
	_ = far.Changed(cf)
	time.Sleep(500 * time.Millisecond)
	if n := waits.Load() - before; n > 3 {
		t.Fatalf("%d waits in half a second for a log its node no longer serves", n)
	}
	l3 := open(7)
	s3.Put(cf, l3)
	at.Store(model.NodeID("n3"))
	var woken bool
	for deadline := time.Now().Add(5 * time.Second); !woken && time.Now().Before(deadline); {
		ch = far.Changed(cf)
		if ch == nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		woken = closes(ch, 200*time.Millisecond)
	}
	if !woken {
		t.Fatal("not woken by the log on the reader's new node")
	}

	far.Close()
	if far.Changed(cf) != nil {
		t.Fatal("a closed client still watches")
	}
}
