package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

type ping struct {
	Seq   int    `json:"seq"`
	Epoch uint64 `json:"epoch"`
}

// inbox records what one node received.
type inbox struct {
	mu  sync.Mutex
	got []Message
}

func (b *inbox) handle(_ context.Context, m Message) {
	b.mu.Lock()
	b.got = append(b.got, m)
	b.mu.Unlock()
}

func (b *inbox) all() []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Message(nil), b.got...)
}

// exercise runs the behaviour both implementations must share: a message
// arrives with its sender and body; an unknown topic and an unknown node
// are errors; after Close nothing arrives.
func exercise(t *testing.T, a, b Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var in inbox
	b.Handle("ping", in.handle)

	m, err := NewMessage("", "capture-2", "ping", ping{Seq: 7, Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, m); err != nil {
		t.Fatalf("send: %v", err)
	}
	got := in.all()
	if len(got) != 1 {
		t.Fatalf("capture-2 received %d messages, want 1", len(got))
	}
	var p ping
	if err := got[0].Decode(&p); err != nil {
		t.Fatal(err)
	}
	if got[0].From != "capture-1" || got[0].To != "capture-2" || p != (ping{7, 3}) {
		t.Fatalf("received %+v with body %+v; want from capture-1, seq 7, epoch 3", got[0], p)
	}

	m.Topic = "unknown"
	if err := a.Send(ctx, m); err == nil {
		t.Fatal("a message of a topic nobody handles was accepted")
	}
	m.Topic, m.To = "ping", "capture-9"
	if err := a.Send(ctx, m); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send to an unknown node: %v, want ErrUnreachable", err)
	}

	// A call waits for the responder's reply; its error comes back as
	// ErrRemote, a topic without a responder as an error of its own.
	b.Respond("double", func(_ context.Context, m Message) (any, error) {
		var p ping
		if err := m.Decode(&p); err != nil {
			return nil, err
		}
		if p.Seq < 0 {
			return nil, errors.New("negative sequence")
		}
		return ping{Seq: 2 * p.Seq, Epoch: p.Epoch}, nil
	})
	call, _ := NewMessage("", "capture-2", "double", ping{Seq: 21, Epoch: 4})
	body, err := a.Call(ctx, call)
	var doubled ping
	if err != nil || json.Unmarshal(body, &doubled) != nil || doubled != (ping{42, 4}) {
		t.Fatalf("call: %s %v", body, err)
	}
	call, _ = NewMessage("", "capture-2", "double", ping{Seq: -1})
	var remote *ErrRemote
	if _, err := a.Call(ctx, call); !errors.As(err, &remote) || remote.Msg != "negative sequence" {
		t.Fatalf("a responder's error: %v", err)
	}
	call.Topic = "nobody"
	if _, err := a.Call(ctx, call); err == nil || errors.As(err, &remote) {
		t.Fatalf("a call nobody answers: %v", err)
	}

	b.Handle("ping", nil)
	m.To = "capture-2"
	if err := a.Send(ctx, m); err == nil {
		t.Fatal("a message was accepted after its handler was removed")
	}
	b.Handle("ping", in.handle)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, m); err == nil {
		t.Fatal("a closed node accepted a message")
	}
	if n := len(in.all()); n != 1 {
		t.Fatalf("capture-2 holds %d messages after close, want 1", n)
	}
}

func TestMem(t *testing.T) {
	hub := NewHub()
	exercise(t, hub.Join("capture-1"), hub.Join("capture-2"))
}

func TestMemCutAndRejoin(t *testing.T) {
	ctx := context.Background()
	hub := NewHub()
	a, b := hub.Join("capture-1"), hub.Join("capture-2")
	var in inbox
	b.Handle("ping", in.handle)
	m, _ := NewMessage("", "capture-2", "ping", ping{Seq: 1})

	hub.Cut("capture-1", "capture-2")
	if err := a.Send(ctx, m); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send over a cut link: %v, want ErrUnreachable", err)
	}
	hub.Heal("capture-1", "capture-2")
	if err := a.Send(ctx, m); err != nil {
		t.Fatalf("send after heal: %v", err)
	}

	// A new incarnation replaces the old one; the old one receives nothing.
	b2 := hub.Join("capture-2")
	var in2 inbox
	b2.Handle("ping", in2.handle)
	if err := a.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	if len(in.all()) != 1 || len(in2.all()) != 1 {
		t.Fatalf("old incarnation got %d, new got %d; want 1 and 1", len(in.all()), len(in2.all()))
	}
	// Closing the old one does not take the new one off the hub.
	_ = b.Close()
	if err := a.Send(ctx, m); err != nil {
		t.Fatalf("send after the old incarnation closed: %v", err)
	}
}

// serve mounts a gRPC transport on an HTTP server the way the agent does:
// one listener, HTTP/1 for the API and unencrypted HTTP/2 for gRPC.
func serve(t *testing.T, g *GRPC) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if IsGRPC(r) {
			g.ServeHTTP(w, r)
			return
		}
		_, _ = w.Write([]byte("api\n"))
	})
	srv := &http.Server{Handler: mux, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func TestGRPC(t *testing.T) {
	addrs := map[model.NodeID]string{}
	var mu sync.Mutex
	resolve := func(id model.NodeID) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		a, ok := addrs[id]
		return a, ok
	}
	a, b := NewGRPC("capture-1", resolve), NewGRPC("capture-2", resolve)
	seenA, seenB := &seen{}, &seen{}
	a.Observe(seenA)
	b.Observe(seenB)
	defer a.Close()
	mu.Lock()
	addrs["capture-1"], addrs["capture-2"] = serve(t, a), serve(t, b)
	mu.Unlock()

	// The same listener still serves plain HTTP/1 to the API's clients.
	resp, err := http.Get("http://" + addrs["capture-2"] + "/api/v2/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP/1 beside gRPC: status %d", resp.StatusCode)
	}

	// A message for capture-3 that reaches capture-2's address (capture-3
	// advertised an address capture-2 now holds) is refused.
	mu.Lock()
	addrs["capture-3"] = addrs["capture-2"]
	mu.Unlock()
	m, _ := NewMessage("", "capture-3", "ping", ping{})
	if err := a.Send(context.Background(), m); err == nil {
		t.Fatal("capture-2 accepted a message for capture-3")
	}
	// The observers heard of it: sent and refused, one error each side.
	if got := seenA.get("sent ping error"); got != 1 {
		t.Errorf("capture-1's observer counted %d failed pings sent; want 1: %v", got, seenA.counts)
	}
	// capture-2 serves no "ping" yet: counted as another topic's.
	if got := seenB.get("received other error"); got != 1 {
		t.Errorf("capture-2's observer counted %d refused messages; want 1: %v", got, seenB.counts)
	}
	exercise(t, a, b)
	// A topic the node never served is counted as "other": the sender
	// chooses it, and a label taking it would grow without end.
	before := seenB.get("received other error")
	for i := range 50 {
		m, _ := NewMessage("capture-1", "capture-2", fmt.Sprintf("made-up-%d", i), ping{})
		_ = a.Send(context.Background(), m)
	}
	if got := seenB.get("received other error") - before; got != 50 {
		t.Errorf("capture-2 counted %d messages of topics it never served as other; want 50: %v", got, seenB.counts)
	}
	for k := range seenB.snapshot() {
		if strings.Contains(k, "made-up") {
			t.Fatalf("capture-2 counted a message under the topic its sender made up: %v", seenB.counts)
		}
	}
	if seenA.get("sent ping ok") == 0 || seenB.get("received ping ok") == 0 {
		t.Errorf("the observers missed the delivered messages: %v / %v", seenA.counts, seenB.counts)
	}
}

// seen counts what an Observer hears, by "direction topic result".
type seen struct {
	mu     sync.Mutex
	counts map[string]int
}

func (s *seen) add(dir, topic string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	r := "ok"
	if err != nil {
		r = "error"
	}
	s.counts[dir+" "+topic+" "+r]++
}

func (s *seen) get(k string) int { s.mu.Lock(); defer s.mu.Unlock(); return s.counts[k] }

func (s *seen) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts)
}

func (s *seen) Sent(topic string, _ int, err error)     { s.add("sent", topic, err) }
func (s *seen) Received(topic string, _ int, err error) { s.add("received", topic, err) }
