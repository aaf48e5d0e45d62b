package transport

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cdcctl/cdcctl/internal/model"
)

// The gRPC service has two unary methods: Deliver (Send) and Call
// (request and reply). Messages travel as JSON (a registered codec), so
// there is no generated code and the bodies are the same bytes the
// in-memory transport carries.
const (
	serviceName  = "cdcctl.transport.v1.Transport"
	deliverPath  = "/" + serviceName + "/Deliver"
	callPath     = "/" + serviceName + "/Call"
	jsonCodecTag = "json"
)

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return jsonCodecTag }

type ack struct{}

// deliverer is what the service descriptor requires of its implementation.
type deliverer interface {
	deliver(ctx context.Context, m Message) error
	respond(ctx context.Context, m Message) (json.RawMessage, error)
}

// reply is a call's answer on the wire: the body, or the responder's
// error.
type reply struct {
	Body  json.RawMessage `json:"body,omitempty"`
	Error string          `json:"error,omitempty"`
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*deliverer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Deliver",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var m Message
			if err := dec(&m); err != nil {
				return nil, err
			}
			if err := srv.(deliverer).deliver(ctx, m); err != nil {
				return nil, status.Error(codes.Unavailable, err.Error())
			}
			return &ack{}, nil
		},
	}, {
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var m Message
			if err := dec(&m); err != nil {
				return nil, err
			}
			body, err := srv.(deliverer).respond(ctx, m)
			var remote *ErrRemote
			switch {
			case errors.As(err, &remote):
				return &reply{Error: remote.Msg}, nil
			case err != nil:
				return nil, status.Error(codes.Unavailable, err.Error())
			}
			return &reply{Body: body}, nil
		},
	}},
	Metadata: "transport.go",
}

// Resolver returns a node's advertised address (host:port).
type Resolver func(model.NodeID) (string, bool)

// GRPC is one node's gRPC transport. It serves on the node's HTTP
// listener (HTTP/2 without TLS, on loopback or a private network), so a
// node has one port; mount it with IsGRPC and ServeHTTP.
type GRPC struct {
	*handlers
	resolve Resolver
	srv     *grpc.Server
	// tls, if set, is how this node dials others (UseTLS); a message
	// then counts as from the node its client certificate names.
	tls *tls.Config

	// observer hears of every message sent and received; nil: nobody.
	observer Observer

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// Observer hears of the messages a node's transport sends (Send and
// Call) and receives (delivered or answered), with their topic, body
// size and outcome. Its methods must be cheap and must not block.
type Observer interface {
	Sent(topic string, bytes int, err error)
	Received(topic string, bytes int, err error)
}

// Observe sets the observer; call it before the first message.
func (g *GRPC) Observe(o Observer) { g.observer = o }

func (g *GRPC) sent(m *Message, err error) {
	if g.observer != nil {
		g.observer.Sent(m.Topic, len(m.Body), err)
	}
}

func (g *GRPC) received(m *Message, err error) {
	if g.observer != nil {
		g.observer.Received(g.handlers.known(m.Topic), len(m.Body), err)
	}
}

// NewGRPC returns the transport of node self; resolve finds other nodes.
func NewGRPC(self model.NodeID, resolve Resolver) *GRPC {
	g := &GRPC{handlers: newHandlers(self), resolve: resolve, conns: map[string]*grpc.ClientConn{}}
	g.srv = grpc.NewServer(grpc.ForceServerCodec(jsonCodec{}))
	g.srv.RegisterService(&serviceDesc, g)
	return g
}

// UseTLS makes the transport dial other nodes over TLS with cfg (its own
// certificate and the cluster's CA) and take a message as from the node
// its sender's verified client certificate names (its common name), not
// the node the message says: with TLS, one node cannot speak for
// another. Call it before the first message.
func (g *GRPC) UseTLS(cfg *tls.Config) { g.tls = cfg }

// deliver checks the sender, then delivers.
func (g *GRPC) deliver(ctx context.Context, m Message) (err error) {
	defer func() { g.received(&m, err) }()
	if err := g.checkSender(ctx, m.From); err != nil {
		return err
	}
	return g.handlers.deliver(ctx, m)
}

// respond checks the sender, then responds.
func (g *GRPC) respond(ctx context.Context, m Message) (body json.RawMessage, err error) {
	defer func() { g.received(&m, err) }()
	if err := g.checkSender(ctx, m.From); err != nil {
		return nil, err
	}
	return g.handlers.respond(ctx, m)
}

// ErrSender is the error of a message whose sender is not the node its
// certificate names.
var ErrSender = errors.New("sender not proven")

// checkSender requires, with TLS, a verified client certificate whose
// common name is the message's sender.
func (g *GRPC) checkSender(ctx context.Context, from model.NodeID) error {
	if g.tls == nil {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return fmt.Errorf("%w: no peer", ErrSender)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return fmt.Errorf("%w: a node-to-node message needs a client certificate signed by the cluster's CA", ErrSender)
	}
	if cn := info.State.VerifiedChains[0][0].Subject.CommonName; cn != string(from) {
		return fmt.Errorf("%w: the message says it is from %q, its certificate names %q", ErrSender, from, cn)
	}
	return nil
}

// IsGRPC tells whether an HTTP request is a gRPC call for ServeHTTP.
func IsGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// ServeHTTP serves the transport's gRPC calls on an HTTP/2 server.
func (g *GRPC) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.srv.ServeHTTP(w, r) }

// Send implements Transport.
func (g *GRPC) Send(ctx context.Context, m Message) error {
	if g.isClosed() {
		return ErrClosed
	}
	m.From = g.self
	addr, ok := g.resolve(m.To)
	if !ok {
		return fmt.Errorf("%w: %s has no known address", ErrUnreachable, m.To)
	}
	conn, err := g.conn(addr)
	if err != nil {
		return err
	}
	err = conn.Invoke(ctx, deliverPath, &m, &ack{}, grpc.ForceCodec(jsonCodec{}))
	g.sent(&m, err)
	if err != nil {
		return fmt.Errorf("%w: %s at %s: %v", ErrUnreachable, m.To, addr, err)
	}
	return nil
}

// Call implements Transport.
func (g *GRPC) Call(ctx context.Context, m Message) (json.RawMessage, error) {
	if g.isClosed() {
		return nil, ErrClosed
	}
	m.From = g.self
	addr, ok := g.resolve(m.To)
	if !ok {
		return nil, fmt.Errorf("%w: %s has no known address", ErrUnreachable, m.To)
	}
	conn, err := g.conn(addr)
	if err != nil {
		return nil, err
	}
	var r reply
	err = conn.Invoke(ctx, callPath, &m, &r, grpc.ForceCodec(jsonCodec{}))
	g.sent(&m, err)
	if err != nil {
		return nil, fmt.Errorf("%w: %s at %s: %v", ErrUnreachable, m.To, addr, err)
	}
	if r.Error != "" {
		return nil, &ErrRemote{Msg: r.Error}
	}
	return r.Body, nil
}

// Respond implements Transport.
func (g *GRPC) Respond(topic string, r Responder) { g.setResponder(topic, r) }

// conn returns the client connection to an address; gRPC reconnects it
// by itself after failures.
func (g *GRPC) conn(addr string) (*grpc.ClientConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.conns[addr]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if g.tls != nil {
		creds = credentials.NewTLS(g.tls.Clone())
	}
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	g.conns[addr] = c
	return c, nil
}

// Handle implements Transport.
func (g *GRPC) Handle(topic string, h Handler) { g.set(topic, h) }

// Close implements Transport: it refuses further messages and closes the
// client connections. The HTTP server it is mounted on is the caller's.
func (g *GRPC) Close() error {
	g.close()
	g.mu.Lock()
	defer g.mu.Unlock()
	for addr, c := range g.conns {
		_ = c.Close()
		delete(g.conns, addr)
	}
	return nil
}
