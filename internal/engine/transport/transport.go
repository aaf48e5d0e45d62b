// Package transport carries messages between nodes: an in-memory
// implementation for several nodes in one process (engine tests) and a
// gRPC one for real processes.
//
// Delivery is at most once and unordered between sends. What must arrive
// is re-sent by its sender until the receiver's acknowledgement shows
// (usually as a fenced write in etcd, which the sender sees in its view).
// Messages that matter carry epochs in their bodies, and receivers drop
// those whose epoch is not the current one: the transport itself keeps no
// state that could go stale.
//
// It imports model only.
package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Message is one message between two nodes.
type Message struct {
	From  model.NodeID    `json:"from"`
	To    model.NodeID    `json:"to"`
	Topic string          `json:"topic"`
	Body  json.RawMessage `json:"body"`
}

// NewMessage encodes body into a message.
func NewMessage(from, to model.NodeID, topic string, body any) (Message, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return Message{}, fmt.Errorf("encode %s message: %w", topic, err)
	}
	return Message{From: from, To: to, Topic: topic, Body: b}, nil
}

// Decode decodes the message's body into v.
func (m Message) Decode(v any) error {
	if err := json.Unmarshal(m.Body, v); err != nil {
		return fmt.Errorf("decode %s message from %s: %w", m.Topic, m.From, err)
	}
	return nil
}

// Handler receives the messages of one topic. It runs on the delivering
// goroutine and must return quickly: record, signal, return.
type Handler func(ctx context.Context, m Message)

// Transport sends messages to other nodes and hands received ones to the
// handler of their topic.
type Transport interface {
	// Send delivers m to m.To once, or returns an error; it never retries.
	Send(ctx context.Context, m Message) error
	// Handle sets the handler of a topic, replacing any earlier one; nil
	// removes it. Messages of a topic without a handler are refused.
	Handle(topic string, h Handler)
	// Call sends a request to m.To and waits for its responder's reply.
	// An error the responder returned comes back as *ErrRemote.
	Call(ctx context.Context, m Message) (json.RawMessage, error)
	// Respond sets the responder of a topic; nil removes it.
	Respond(topic string, r Responder)
	// Close stops sending and receiving.
	Close() error
}

// ErrUnreachable means the destination node is not known or not listening.
var ErrUnreachable = errors.New("node unreachable")

// ErrNoHandler means the destination does not handle the message's topic.
var ErrNoHandler = errors.New("no handler for the topic")

// ErrClosed means the transport was closed.
var ErrClosed = errors.New("transport closed")

// handlers is the topic table both implementations deliver through.
type handlers struct {
	self       model.NodeID
	mu         sync.RWMutex
	byName     map[string]Handler
	responders map[string]Responder
	// topics are the topics ever served here: the only ones a received
	// message is counted under (known).
	topics map[string]bool
	closed bool
}

func newHandlers(self model.NodeID) *handlers {
	return &handlers{self: self, byName: map[string]Handler{}, responders: map[string]Responder{}, topics: map[string]bool{}}
}

// OtherTopic is what a received message of a topic this node never
// served is counted under: the topic is the sender's to choose, and a
// metric label taking it would let anyone who reaches the port (a
// message is counted before its sender is checked) grow the node's
// series without end.
const OtherTopic = "other"

// known is topic as a received message is counted: itself if this node
// ever served it, OtherTopic if not.
func (h *handlers) known(topic string) string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.topics[topic] {
		return topic
	}
	return OtherTopic
}

func (h *handlers) set(topic string, fn Handler) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fn == nil {
		delete(h.byName, topic)
		return
	}
	h.byName[topic] = fn
	h.topics[topic] = true
}

func (h *handlers) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
}

func (h *handlers) isClosed() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closed
}

// deliver hands m to its topic's handler. A message addressed to another
// node (it reached an address that another node now holds) is refused.
func (h *handlers) deliver(ctx context.Context, m Message) error {
	h.mu.RLock()
	fn, closed := h.byName[m.Topic], h.closed
	h.mu.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case m.To != h.self:
		return fmt.Errorf("%w: message for %s reached %s", ErrUnreachable, m.To, h.self)
	case fn == nil:
		return fmt.Errorf("%w %q on %s", ErrNoHandler, m.Topic, h.self)
	}
	fn(ctx, m)
	return nil
}
