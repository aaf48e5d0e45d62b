package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Hub connects the in-memory transports of one process, one per node.
// It can cut the link between two nodes, for fault-injection tests.
type Hub struct {
	mu    sync.Mutex
	nodes map[model.NodeID]*Mem
	cut   map[[2]model.NodeID]bool
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{nodes: map[model.NodeID]*Mem{}, cut: map[[2]model.NodeID]bool{}}
}

// Join returns the transport of a node; a node that joins again (a new
// incarnation) replaces its earlier transport, which stops receiving.
func (h *Hub) Join(id model.NodeID) *Mem {
	m := &Mem{hub: h, handlers: newHandlers(id)}
	h.mu.Lock()
	h.nodes[id] = m
	h.mu.Unlock()
	return m
}

// Cut drops every message from a to b until Heal.
func (h *Hub) Cut(a, b model.NodeID) {
	h.mu.Lock()
	h.cut[[2]model.NodeID{a, b}] = true
	h.mu.Unlock()
}

// Heal undoes Cut.
func (h *Hub) Heal(a, b model.NodeID) {
	h.mu.Lock()
	delete(h.cut, [2]model.NodeID{a, b})
	h.mu.Unlock()
}

func (h *Hub) route(from, to model.NodeID) (*Mem, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cut[[2]model.NodeID{from, to}] {
		return nil, fmt.Errorf("%w: %s (link cut)", ErrUnreachable, to)
	}
	dst := h.nodes[to]
	if dst == nil || dst.isClosed() {
		return nil, fmt.Errorf("%w: %s", ErrUnreachable, to)
	}
	return dst, nil
}

func (h *Hub) leave(m *Mem) {
	h.mu.Lock()
	if h.nodes[m.self] == m {
		delete(h.nodes, m.self)
	}
	h.mu.Unlock()
}

// Mem is one node's in-memory transport.
type Mem struct {
	hub *Hub
	*handlers
}

// Send implements Transport. The body is copied, as a wire would.
func (m *Mem) Send(ctx context.Context, msg Message) error {
	if m.isClosed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	msg.From = m.self
	dst, err := m.hub.route(m.self, msg.To)
	if err != nil {
		return err
	}
	msg.Body = slices.Clone(msg.Body)
	return dst.deliver(ctx, msg)
}

// Handle implements Transport.
func (m *Mem) Handle(topic string, h Handler) { m.set(topic, h) }

// Call implements Transport.
func (m *Mem) Call(ctx context.Context, msg Message) (json.RawMessage, error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	msg.From = m.self
	dst, err := m.hub.route(m.self, msg.To)
	if err != nil {
		return nil, err
	}
	msg.Body = slices.Clone(msg.Body)
	reply, err := dst.respond(ctx, msg)
	if err != nil {
		return nil, err
	}
	if _, err := m.hub.route(msg.To, m.self); err != nil {
		return nil, err // the reply is lost on a cut link
	}
	return reply, nil
}

// Respond implements Transport.
func (m *Mem) Respond(topic string, r Responder) { m.setResponder(topic, r) }

// Close implements Transport.
func (m *Mem) Close() error {
	m.close()
	m.hub.leave(m)
	return nil
}

// Inject delivers a message as if m.From had sent it: fault-injection
// tests use it to replay stale or forged messages.
func (h *Hub) Inject(ctx context.Context, m Message) error {
	dst, err := h.route(m.From, m.To)
	if err != nil {
		return err
	}
	m.Body = slices.Clone(m.Body)
	return dst.deliver(ctx, m)
}
