package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The transport topics of remote reads.
const (
	TopicRead = "eventlog.read"
	TopicDDLs = "eventlog.ddls"
)

// Server answers other nodes' reads of the logs whose readers run here.
type Server struct {
	mu   sync.RWMutex
	logs map[model.ChangefeedID]*Log

	bellMu sync.Mutex
	bell   chan struct{} // closed at the next change of any log (watch.go)
}

// NewServer returns a server holding no logs.
func NewServer() *Server { return &Server{logs: map[model.ChangefeedID]*Log{}} }

// Put serves a changefeed's log (replacing an earlier one).
func (s *Server) Put(cf model.ChangefeedID, l *Log) {
	s.mu.Lock()
	was := s.logs[cf]
	s.logs[cf] = l
	s.mu.Unlock()
	if was != l {
		go s.relay(cf, l)
	}
	s.ring() // a wait that found it gone finds it now
}

// Remove stops serving a changefeed's log if it is l.
func (s *Server) Remove(cf model.ChangefeedID, l *Log) {
	s.mu.Lock()
	removed := s.logs[cf] == l
	if removed {
		delete(s.logs, cf)
	}
	s.mu.Unlock()
	if removed {
		s.ring()
	}
}

// Bytes is the space each served log takes (Log.Bytes).
func (s *Server) Bytes() map[model.ChangefeedID]uint64 {
	s.mu.RLock()
	logs := make(map[model.ChangefeedID]*Log, len(s.logs))
	for cf, l := range s.logs {
		logs[cf] = l
	}
	s.mu.RUnlock()
	out := make(map[model.ChangefeedID]uint64, len(logs))
	for cf, l := range logs {
		out[cf] = l.Bytes()
	}
	return out
}

// Get returns the log served for a changefeed, or nil.
func (s *Server) Get(cf model.ChangefeedID) *Log {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.logs[cf]
}

func (s *Server) log(cf model.ChangefeedID) (*Log, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.logs[cf]
	if !ok {
		return nil, fmt.Errorf("the reader of changefeed %s does not run on this node (yet)", cf)
	}
	return l, nil
}

// Register answers the topics on a transport; Unregister stops.
func (s *Server) Register(tr transport.Transport) {
	tr.Respond(TopicRead, s.onRead)
	tr.Respond(TopicDDLs, s.onDDLs)
	tr.Respond(TopicWait, s.onWait)
}

// Unregister stops answering on a transport.
func (s *Server) Unregister(tr transport.Transport) {
	tr.Respond(TopicRead, nil)
	tr.Respond(TopicDDLs, nil)
	tr.Respond(TopicWait, nil)
}

type readRequest struct {
	Changefeed model.ChangefeedID `json:"changefeed"`
	Span       model.Span         `json:"span"`
	// StartB and EndB carry the span's bounds when they are not UTF-8
	// (a key of bytes: MySQL's BINARY), which JSON's strings are.
	StartB []byte   `json:"start_b,omitempty"`
	EndB   []byte   `json:"end_b,omitempty"`
	From   model.Ts `json:"from"`
	// At and Seq continue a transaction returned in parts.
	At   model.Ts `json:"at,omitempty"`
	Seq  uint32   `json:"seq,omitempty"`
	UpTo model.Ts `json:"up_to"`
	Max  int      `json:"max"`
}

type readReply struct {
	Batch
	Position model.Ts `json:"position"`
	At       model.Ts `json:"at,omitempty"`
	Seq      uint32   `json:"seq,omitempty"`
}

// maxWireRows bounds one reply, whatever the reader asked.
const maxWireRows = 4096

// request decodes a read and finds the log it asks for.
func (s *Server) request(m transport.Message) (readRequest, *Log, error) {
	var req readRequest
	if err := m.Decode(&req); err != nil {
		return req, nil, err
	}
	if req.StartB != nil {
		req.Span.Start = string(req.StartB)
	}
	if req.EndB != nil {
		req.Span.End = string(req.EndB)
	}
	l, err := s.log(req.Changefeed)
	return req, l, err
}

func (s *Server) onRead(_ context.Context, m transport.Message) (any, error) {
	req, l, err := s.request(m)
	if err != nil {
		return nil, err
	}
	from := source.Cursor{Done: req.From, At: req.At, Seq: req.Seq}
	evs, cur, err := l.Read(req.Span, from, req.UpTo, min(max(req.Max, 1), maxWireRows))
	if err != nil {
		return nil, err
	}
	return readReply{Batch: encodeBatch(evs), Position: cur.Done, At: cur.At, Seq: cur.Seq}, nil
}

func (s *Server) onDDLs(_ context.Context, m transport.Message) (any, error) {
	req, l, err := s.request(m)
	if err != nil {
		return nil, err
	}
	return encodeBatch(l.DDLs(req.Span.Table, req.From, req.UpTo)), nil
}

// Client reads logs wherever their readers run: on the node maintaining
// the changefeed. It implements source.LogReader.
type Client struct {
	tr transport.Transport
	// locate names the node whose reader serves a changefeed's log.
	locate func(model.ChangefeedID) (model.NodeID, bool)
	// self and near: a log whose reader runs on this node is read from
	// near, the node's own server, without the transport. Through it
	// every read of 256 rows was a JSON round trip to this very process:
	// a 100,000-row transaction on a loaded machine took minutes.
	self model.NodeID
	near *Server

	mu   sync.Mutex
	defs map[string]*source.TableDef // by their JSON, so equal definitions share one value

	watch *watches // the remote logs partitions wait on (watch.go)
}

// NewClient returns a client sending through tr, and reading the logs
// that near (this node's server, self; nil: none) serves directly.
func NewClient(tr transport.Transport, locate func(model.ChangefeedID) (model.NodeID, bool), self model.NodeID, near *Server) *Client {
	return &Client{tr: tr, locate: locate, self: self, near: near, defs: map[string]*source.TableDef{}, watch: newWatches()}
}

// nearLog returns the log of cf if its reader runs on this node and its
// log is served here, else nil (the transport's answer then says why).
func (c *Client) nearLog(cf model.ChangefeedID) *Log {
	if c.near == nil {
		return nil
	}
	if node, ok := c.locate(cf); !ok || node != c.self {
		return nil
	}
	return c.near.Get(cf)
}

// CallTimeout bounds a read of another node's log: one that gets no
// answer fails, and its partition reads again on its next pass instead
// of waiting (a graceful stop would wait with it).
const CallTimeout = 10 * time.Second

func (c *Client) call(ctx context.Context, topic string, req readRequest, reply any) error {
	node, ok := c.locate(req.Changefeed)
	if !ok {
		return fmt.Errorf("changefeed %s has no maintainer, so no reader, right now", req.Changefeed)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	m, err := transport.NewMessage("", node, topic, req)
	if err != nil {
		return err
	}
	body, err := c.tr.Call(ctx, m)
	if err != nil {
		return fmt.Errorf("read the event log of %s on %s: %w", req.Changefeed, node, err)
	}
	return json.Unmarshal(body, reply)
}

// Read implements source.LogReader.
func (c *Client) Read(ctx context.Context, cf model.ChangefeedID, span model.Span, from source.Cursor, upTo model.Ts, maxRows int) ([]source.Event, source.Cursor, error) {
	if l := c.nearLog(cf); l != nil {
		return l.Read(span, from, upTo, maxRows)
	}
	var r readReply
	req := readRequest{Changefeed: cf, Span: span, From: from.Done, At: from.At, Seq: from.Seq, UpTo: upTo, Max: maxRows}
	req.Span.Start, req.StartB = wireText(span.Start)
	req.Span.End, req.EndB = wireText(span.End)
	if err := c.call(ctx, TopicRead, req, &r); err != nil {
		return nil, from, err
	}
	evs, err := c.decodeBatch(span.Table, r.Batch)
	if err != nil {
		return nil, from, err
	}
	return evs, source.Cursor{Done: r.Position, At: r.At, Seq: r.Seq}, nil
}

// Changed implements source.LogWatcher: the log's Changed when it is
// this node's, else a channel its node's answers to a long poll close
// (watch.go); nil when neither can be had now (the partition polls).
func (c *Client) Changed(cf model.ChangefeedID) <-chan struct{} {
	if l := c.nearLog(cf); l != nil {
		return l.Changed()
	}
	return c.remoteChanged(cf)
}

// DDLs implements source.LogReader.
func (c *Client) DDLs(ctx context.Context, cf model.ChangefeedID, table string, from, upTo model.Ts) ([]source.Event, error) {
	if l := c.nearLog(cf); l != nil {
		return l.DDLs(table, from, upTo), nil
	}
	var b Batch
	if err := c.call(ctx, TopicDDLs, readRequest{Changefeed: cf, Span: model.Span{Table: table}, From: from, UpTo: upTo}, &b); err != nil {
		return nil, err
	}
	return c.decodeBatch(table, b)
}

// Batch is events of one table on the wire: their table definitions once,
// then each event naming its definition by index.
type Batch struct {
	Defs   []*source.TableDef `json:"defs,omitempty"`
	Events []wireEvent        `json:"events,omitempty"`
}

type wireEvent struct {
	Kind          source.Kind        `json:"k"`
	Def           int                `json:"d"`
	CommitTs      model.Ts           `json:"ts"`
	SchemaVersion uint64             `json:"sv,omitempty"`
	TableVersion  model.Ts           `json:"tv,omitempty"`
	Op            source.Op          `json:"op,omitempty"`
	Key           string             `json:"key,omitempty"`
	KeyB          []byte             `json:"kb,omitempty"` // Key, when it is not UTF-8
	New           []wireValue        `json:"new,omitempty"`
	Old           []wireValue        `json:"old,omitempty"`
	HasNew        bool               `json:"hn,omitempty"`
	HasOld        bool               `json:"ho,omitempty"`
	Statement     string             `json:"sql,omitempty"`
	TxnOrder      uint32             `json:"to,omitempty"`
	TxnTableOrder uint32             `json:"tto,omitempty"`
	Txn           *source.TxnSummary `json:"txn,omitempty"`
}

// A wire value's text is T, or B when it is not UTF-8: a JSON string
// holds only UTF-8, and encoding/json writes any other byte as U+FFFD (a
// MySQL BLOB's or BINARY key's bytes arrived so on another capture).
type wireValue struct {
	T string `json:"t,omitempty"`
	B []byte `json:"b,omitempty"`
	N bool   `json:"n,omitempty"`
	U bool   `json:"u,omitempty"`
}

// wireText returns a text as a JSON string takes it: the text, or its
// bytes when it is not UTF-8.
func wireText(s string) (string, []byte) {
	if utf8.ValidString(s) {
		return s, nil
	}
	return "", []byte(s)
}

// fromWireText is wireText's text again.
func fromWireText(t string, b []byte) string {
	if b != nil {
		return string(b)
	}
	return t
}

func encodeBatch(evs []source.Event) Batch {
	var b Batch
	idx := map[*source.TableDef]int{}
	for i := range evs {
		e := &evs[i]
		d, ok := idx[e.Def]
		if !ok {
			d = len(b.Defs)
			idx[e.Def] = d
			b.Defs = append(b.Defs, e.Def)
		}
		key, keyB := wireText(e.Key)
		b.Events = append(b.Events, wireEvent{
			Kind: e.Kind, Def: d, CommitTs: e.CommitTs, SchemaVersion: e.SchemaVersion, TableVersion: e.TableVersion,
			Op: e.Op, Key: key, KeyB: keyB, New: toWire(e.New), Old: toWire(e.Old), HasNew: e.New != nil, HasOld: e.Old != nil, Statement: e.Statement,
			TxnOrder: e.TxnOrder, TxnTableOrder: e.TxnTableOrder, Txn: e.Txn,
		})
	}
	return b
}

func toWire(vs []source.Value) []wireValue {
	if vs == nil {
		return nil
	}
	out := make([]wireValue, len(vs))
	for i, v := range vs {
		t, b := wireText(v.Text)
		out[i] = wireValue{T: t, B: b, N: v.Null, U: v.Unchanged}
	}
	return out
}

func fromWire(vs []wireValue, has bool) []source.Value {
	if !has {
		return nil
	}
	out := make([]source.Value, len(vs))
	for i, v := range vs {
		out[i] = source.Value{Text: fromWireText(v.T, v.B), Null: v.N, Unchanged: v.U}
	}
	return out
}

func (c *Client) decodeBatch(table string, b Batch) ([]source.Event, error) {
	defs := make([]*source.TableDef, len(b.Defs))
	c.mu.Lock()
	for i, d := range b.Defs {
		k, _ := json.Marshal(d)
		if have, ok := c.defs[string(k)]; ok {
			defs[i] = have
		} else {
			c.defs[string(k)] = d
			defs[i] = d
		}
	}
	c.mu.Unlock()
	out := make([]source.Event, len(b.Events))
	for i, w := range b.Events {
		if w.Def < 0 || w.Def >= len(defs) {
			return nil, fmt.Errorf("event log reply: an event names table definition %d of %d", w.Def, len(defs))
		}
		out[i] = source.Event{
			Kind: w.Kind, Table: table, CommitTs: w.CommitTs, Def: defs[w.Def], SchemaVersion: w.SchemaVersion, TableVersion: w.TableVersion,
			Op: w.Op, Key: fromWireText(w.Key, w.KeyB), New: fromWire(w.New, w.HasNew), Old: fromWire(w.Old, w.HasOld), Statement: w.Statement,
			TxnOrder: w.TxnOrder, TxnTableOrder: w.TxnTableOrder, Txn: w.Txn,
		}
	}
	return out, nil
}
