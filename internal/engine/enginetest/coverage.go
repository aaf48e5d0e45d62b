package enginetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Coverage checks a changefeed's routing table in etcd every 50 ms, and
// at every call of Err: each table's key space is covered with no gap
// and no overlap. It keeps the first violation.
type Coverage struct {
	store  *meta.Store
	cf     model.ChangefeedID
	mu     sync.Mutex
	first  error
	checks int
	stop   chan struct{}
	done   chan struct{}
}

// WatchCoverage starts watching a changefeed's routing table until the
// test ends.
func WatchCoverage(t testing.TB, store *meta.Store, cf model.ChangefeedID) *Coverage {
	w := &Coverage{store: store, cf: cf, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
				w.check()
			}
		}
	}()
	t.Cleanup(w.Close)
	return w
}

func (w *Coverage) check() {
	st, err := w.store.Load(context.Background())
	if err != nil {
		return
	}
	var spans []model.Span
	for _, r := range st.Partitions[w.cf] {
		spans = append(spans, r.Route.Span)
	}
	err = model.CheckCoverage(spans)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	if err != nil && w.first == nil {
		w.first = fmt.Errorf("revision %d: %w", st.Revision, err)
	}
}

// Close stops watching.
func (w *Coverage) Close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
		<-w.done
	}
}

// Count is how many times the routing table was checked.
func (w *Coverage) Count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.checks
}

// Err checks once more and returns the first violation seen.
func (w *Coverage) Err() error {
	w.check()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// MiddleKey returns a generator key in the middle of a span, so that
// both halves of a split there get keys.
func MiddleKey(g *gen.Generator, s model.Span) (string, bool) {
	var in []string
	for i := range g.Config().Keys {
		if k := g.Key(i); s.Contains(k) {
			in = append(in, k)
		}
	}
	if len(in) < 2 {
		return "", false
	}
	return in[len(in)/2], true
}
