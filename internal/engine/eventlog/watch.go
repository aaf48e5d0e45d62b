package eventlog

// A partition with nothing to read waits for its log to change
// (source.LogWatcher) rather than polling it with a back-off of up to
// 160 ms. A log on this node says so itself (Log.Changed); a log on
// another node is watched through the transport by a long poll: the
// client asks the log's node, once for all the logs there its
// partitions wait on, to answer as soon as one resolves past what the
// client has seen, and wakes the partitions of those that did. So the
// partitions of a changefeed whose reader runs elsewhere follow its log
// as closely as those beside it, at one call per node pair at a time.

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// TopicWait is the long poll of remote logs' changes.
const TopicWait = "eventlog.wait"

const (
	// maxWait bounds how long a server holds a wait: a client that went
	// away is forgotten by then.
	maxWait = 2 * time.Second
	// waitGap is the least time between the starts of a client's waits
	// on one node: while logs change all the time (every tick of every
	// changefeed), the answers come at most this often.
	waitGap = 25 * time.Millisecond
	// watchIdle: a log no partition asked about for this long is no
	// longer watched (its partitions stopped or moved).
	watchIdle = 10 * time.Second
	// goneRetry: a node that said it does not serve a log (its reader
	// moved, or has not started there yet) is asked again after this.
	goneRetry = time.Second
	// waitRetry: after a failed wait (the node is unreachable, or does
	// not answer waits) the next one waits this long; the partitions
	// poll meanwhile.
	waitRetry = time.Second
)

type waitRequest struct {
	// Logs are the resolved positions the caller has seen, by
	// changefeed.
	Logs   map[model.ChangefeedID]model.Ts `json:"logs"`
	WaitMs int64                           `json:"wait_ms"`
}

type waitReply struct {
	// Resolved are the logs resolved past what the caller had seen.
	Resolved map[model.ChangefeedID]model.Ts `json:"resolved,omitempty"`
	// Gone are the logs this node does not serve.
	Gone []model.ChangefeedID `json:"gone,omitempty"`
}

// bellNow returns the channel closed at the next change of any log
// served here.
func (s *Server) bellNow() <-chan struct{} {
	s.bellMu.Lock()
	defer s.bellMu.Unlock()
	if s.bell == nil {
		s.bell = make(chan struct{})
	}
	return s.bell
}

// ring wakes the waits.
func (s *Server) ring() {
	s.bellMu.Lock()
	if s.bell != nil {
		close(s.bell)
		s.bell = nil
	}
	s.bellMu.Unlock()
}

// relay rings at every change of a served log, until it is closed or no
// longer served (a closed log's Changed stays the same closed channel).
func (s *Server) relay(cf model.ChangefeedID, l *Log) {
	ch := l.Changed()
	for {
		<-ch
		s.ring()
		next := l.Changed()
		if next == ch || s.Get(cf) != l {
			return
		}
		ch = next
	}
}

func (s *Server) onWait(ctx context.Context, m transport.Message) (any, error) {
	var req waitRequest
	if err := m.Decode(&req); err != nil {
		return nil, err
	}
	t := time.NewTimer(min(time.Duration(req.WaitMs)*time.Millisecond, maxWait))
	defer t.Stop()
	for {
		bell := s.bellNow()
		rep := waitReply{Resolved: map[model.ChangefeedID]model.Ts{}}
		for cf, seen := range req.Logs {
			l := s.Get(cf)
			if l == nil {
				rep.Gone = append(rep.Gone, cf)
			} else if r := l.Resolved(); r > seen {
				rep.Resolved[cf] = r
			}
		}
		if len(rep.Resolved) > 0 || len(rep.Gone) > 0 {
			return rep, nil
		}
		select {
		case <-bell:
		case <-t.C:
			return rep, nil
		case <-ctx.Done():
			return rep, nil
		}
	}
}

// watched is a remote log partitions wait on.
type watched struct {
	ch     chan struct{} // closed when the log resolves past seen
	seen   model.Ts
	node   model.NodeID // where seen was read
	asked  time.Time    // the last time a partition asked
	gone   model.NodeID // a node that said it does not serve the log
	goneAt time.Time
}

// refusedBy says node said lately that it does not serve the log.
func (lw *watched) refusedBy(node model.NodeID, now time.Time) bool {
	return lw.gone == node && now.Sub(lw.goneAt) < goneRetry
}

// watches is the client's side of the long polls.
type watches struct {
	mu      sync.Mutex
	logs    map[model.ChangefeedID]*watched
	polling map[model.NodeID]bool // a wait loop runs for the node
	ctx     context.Context
	cancel  context.CancelFunc
}

func newWatches() *watches {
	ctx, cancel := context.WithCancel(context.Background())
	return &watches{logs: map[model.ChangefeedID]*watched{}, polling: map[model.NodeID]bool{}, ctx: ctx, cancel: cancel}
}

// remoteChanged is Changed for a log on another node: a channel closed
// when it resolves further, nil when it cannot be watched now.
func (c *Client) remoteChanged(cf model.ChangefeedID) <-chan struct{} {
	if c.tr == nil {
		return nil
	}
	node, ok := c.locate(cf)
	if !ok || node == c.self {
		return nil
	}
	w := c.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return nil
	}
	lw := w.logs[cf]
	if lw == nil {
		lw = &watched{ch: make(chan struct{})}
		w.logs[cf] = lw
	}
	lw.asked = time.Now()
	if lw.refusedBy(node, time.Now()) {
		return nil
	}
	if !w.polling[node] {
		w.polling[node] = true
		go c.poll(node)
	}
	return lw.ch
}

// poll waits on node's logs until no partition asks about any of them.
func (c *Client) poll(node model.NodeID) {
	w := c.watch
	for {
		began := time.Now()
		req := waitRequest{Logs: map[model.ChangefeedID]model.Ts{}, WaitMs: maxWait.Milliseconds()}
		w.mu.Lock()
		for cf, lw := range w.logs {
			if began.Sub(lw.asked) > watchIdle {
				delete(w.logs, cf)
				continue
			}
			if at, ok := c.locate(cf); !ok || at != node || lw.refusedBy(node, began) {
				continue
			}
			if lw.node != node {
				// Another node's log (the reader moved): its positions
				// start where its reader resumed.
				lw.node, lw.seen = node, 0
			}
			req.Logs[cf] = lw.seen
		}
		if len(req.Logs) == 0 || w.ctx.Err() != nil {
			w.polling[node] = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		var rep waitReply
		err := c.waitOn(node, req, &rep)
		w.mu.Lock()
		for cf, ts := range rep.Resolved {
			if lw := w.logs[cf]; lw != nil && lw.node == node && ts > lw.seen {
				lw.seen = ts
				close(lw.ch)
				lw.ch = make(chan struct{})
			}
		}
		for _, cf := range rep.Gone {
			if lw := w.logs[cf]; lw != nil {
				lw.gone, lw.goneAt = node, time.Now()
			}
		}
		w.mu.Unlock()
		pause := waitGap - time.Since(began)
		if err != nil {
			pause = waitRetry
		}
		if pause > 0 {
			select {
			case <-w.ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

// waitOn sends one wait to node.
func (c *Client) waitOn(node model.NodeID, req waitRequest, rep *waitReply) error {
	ctx, cancel := context.WithTimeout(c.watch.ctx, maxWait+5*time.Second)
	defer cancel()
	m, err := transport.NewMessage("", node, TopicWait, req)
	if err != nil {
		return err
	}
	body, err := c.tr.Call(ctx, m)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, rep)
}

// Close stops watching remote logs; reads go on.
func (c *Client) Close() {
	c.watch.cancel()
}
