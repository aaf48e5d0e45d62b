package dispatcher_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/dispatcher"
	"github.com/cdcctl/cdcctl/internal/engine/sink/blackhole"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// quietReader has nothing to read; it counts the reads, and says it
// awaits events (a snapshot's chunk on its way) when awaiting is set.
type quietReader struct {
	awaiting bool
	reads    atomic.Int64
}

func (r *quietReader) Read(context.Context, model.Ts, int) ([]source.Event, error) {
	r.reads.Add(1)
	return nil, nil
}
func (r *quietReader) Position() model.Ts { return 1 }
func (r *quietReader) Awaiting() bool     { return r.awaiting }

type quietSource struct{ r *quietReader }

func (s quietSource) Open(model.Span, model.Ts) (source.Reader, error) { return s.r, nil }
func (s quietSource) DDLs(string, model.Ts, model.Ts) []source.Event   { return nil }

// A partition with nothing to read backs off (its pause doubling up to
// eight times Idle), but not while its reader awaits events: a copying
// partition's chunk and its high watermark are on their way, and each
// back-off delayed the chunk's rows (up to 160 ms a chunk by default).
// Both run side by side, so a loaded machine slows both.
func TestAReaderAwaitingEventsIsNotBackedOff(t *testing.T) {
	run := func(r *quietReader) context.CancelFunc {
		d, err := dispatcher.New(dispatcher.Config{ID: "p1.1", Span: model.Span{Table: "t"}, Source: quietSource{r}, Sink: blackhole.New(),
			Now: func() model.Ts { return 2 }, Idle: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go d.Run(ctx) //nolint:errcheck // cancelled below
		return cancel
	}
	awaiting, plain := &quietReader{awaiting: true}, &quietReader{}
	stopA, stopP := run(awaiting), run(plain)
	time.Sleep(600 * time.Millisecond)
	stopA()
	stopP()
	a, p := awaiting.reads.Load(), plain.reads.Load()
	t.Logf("in 600 ms: %d reads awaiting, %d backing off", a, p)
	if a < 2*p {
		t.Fatalf("a reader awaiting events was read %d times, one backed off %d: want at least twice as often", a, p)
	}
}
