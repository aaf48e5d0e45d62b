package transport

import (
	"context"
	"encoding/json"
	"fmt"
)

// Responder answers the calls of one topic: it returns the reply body,
// or an error the caller receives as its message. Unlike a Handler it may
// take time (it reads), bounded by ctx.
type Responder func(ctx context.Context, m Message) (any, error)

// ErrRemote wraps the error a responder returned.
type ErrRemote struct{ Msg string }

func (e *ErrRemote) Error() string { return e.Msg }

// respond runs the responder of m's topic and encodes its reply.
func (h *handlers) respond(ctx context.Context, m Message) (json.RawMessage, error) {
	h.mu.RLock()
	fn, closed := h.responders[m.Topic], h.closed
	h.mu.RUnlock()
	switch {
	case closed:
		return nil, ErrClosed
	case m.To != h.self:
		return nil, fmt.Errorf("%w: call for %s reached %s", ErrUnreachable, m.To, h.self)
	case fn == nil:
		return nil, fmt.Errorf("%w %q on %s", ErrNoHandler, m.Topic, h.self)
	}
	reply, err := fn(ctx, m)
	if err != nil {
		return nil, &ErrRemote{Msg: err.Error()}
	}
	b, err := json.Marshal(reply)
	if err != nil {
		return nil, fmt.Errorf("encode %s reply: %w", m.Topic, err)
	}
	return b, nil
}

func (h *handlers) setResponder(topic string, fn Responder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fn == nil {
		delete(h.responders, topic)
		return
	}
	h.responders[topic] = fn
	h.topics[topic] = true
}
