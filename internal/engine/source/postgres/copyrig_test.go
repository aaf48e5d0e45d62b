package postgres

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/eventlog"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The copy rig: a changefeed's reader pulling into an event log, and
// partitions reading spans from it as dispatchers do.

// copyRig is a changefeed's reader pulling into an event log, and
// partitions reading it as dispatchers do.
type copyRig struct {
	// count: partitions count the events they read instead of keeping
	// them (benchmarks).
	count  bool
	src    *Source
	log    *eventlog.Log
	start  model.Ts
	cancel context.CancelFunc
	done   chan error
	// closing is set when the test ends, before the log closes: a
	// partition a failed test left running then ends quietly instead of
	// panicking on the closed log, which hid the test's own failure.
	closing atomic.Bool
}

func startCopyRig(t testing.TB, uri string, cf model.ChangefeedID) *copyRig {
	t.Helper()
	return startCopyRigWith(t, uri, cf, nil)
}

// startCopyRigWith is startCopyRig with the source set up by set before
// it pulls.
func startCopyRigWith(t testing.TB, uri string, cf model.ChangefeedID, set func(*Source)) *copyRig {
	t.Helper()
	ctx := context.Background()
	stored, pos, err := Pin(ctx, uri, cf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return pullFrom(t, stored, pos, cf, set)
}

// pullFrom starts a copy rig's reader of a pinned changefeed (its stored
// URI) at a resume point, into a new log.
func pullFrom(t testing.TB, stored string, pos source.Position, cf model.ChangefeedID, set func(*Source)) *copyRig {
	t.Helper()
	ctx := context.Background()
	cfg, err := ParseURI(stored)
	if err != nil {
		t.Fatal(err)
	}
	log, err := eventlog.Open("", cfg.Start, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := Open(stored, source.Env{Changefeed: cf, Logs: eventlog.Local{Log: log}})
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(src)
	}
	pctx, cancel := context.WithCancel(ctx)
	rig := &copyRig{src: src, log: log, start: cfg.Start, cancel: cancel, done: make(chan error, 1)}
	go func() { rig.done <- src.Pull(pctx, pos, log) }()
	t.Cleanup(func() {
		rig.closing.Store(true)
		cancel()
		_ = src.Close()
		_ = log.Close()
	})
	return rig
}

// waitFor waits up to d for the row of key among what p read, failing
// the test when it does not come, or at once, saying why, when the rig's
// reader stopped.
func (rig *copyRig) waitFor(t testing.TB, p *partition, key string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); !p.has(key); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-rig.done:
			t.Fatalf("the reader stopped before row %s arrived: %v", key, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("row %s did not arrive within %s", key, d)
		}
	}
}

func (rig *copyRig) stop(t testing.TB) {
	t.Helper()
	rig.cancel()
	if err := <-rig.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// partition reads a span as a dispatcher does: up to the table's next
// schema change, which it passes, steps over and keeps with its rows.
type partition struct {
	span   model.Span
	r      source.Reader
	mu     sync.Mutex
	evs    []source.Event
	copied model.CopyProgress
	n      int // events read
	begun  int // copies begun again after one was done
	// holdAt, when above 0, pauses the reads once that many rows are
	// copied (between chunks), so a test can act while the copy is
	// surely under way however fast the machine copies; release resumes.
	holdAt int64
	quit   chan struct{}
	done   chan struct{}
	// finished is closed when the copy is first seen done, so a
	// benchmark's clock stops then, not at its next poll.
	finished chan struct{}
}

func (rig *copyRig) run(span model.Span, from model.Ts, copied model.CopyProgress) *partition {
	return rig.runHeld(span, from, copied, 0)
}

// runHeld runs a partition that pauses once holdAt rows are copied.
func (rig *copyRig) runHeld(span model.Span, from model.Ts, copied model.CopyProgress, holdAt int64) *partition {
	r, err := rig.src.OpenCopying(span, from, copied)
	if err != nil {
		panic(err)
	}
	p := &partition{span: span, r: r, copied: copied, holdAt: holdAt, quit: make(chan struct{}), done: make(chan struct{}), finished: make(chan struct{})}
	if copied.Done {
		close(p.finished)
	}
	go func() {
		defer close(p.done)
		if c, ok := r.(source.Closer); ok {
			defer c.Close()
		}
		for {
			select {
			case <-p.quit:
				if pt, ok := r.(source.Parted); !ok || !pt.Inside() {
					return
				}
			default:
			}
			if p.held() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			upTo := model.Ts(math.MaxInt64 >> 1)
			ddls := rig.src.DDLs(span.Table, r.Position(), upTo)
			if len(ddls) > 0 {
				upTo = ddls[0].CommitTs - 1
			}
			// As a dispatcher does: the log's change signal taken before
			// the read, waited on (at most a while) when it read nothing.
			var changed <-chan struct{}
			if n, ok := r.(source.Notifier); ok {
				changed = n.Changed()
			}
			evs, err := r.Read(context.Background(), upTo, 256)
			if err != nil {
				if rig.closing.Load() {
					return // the test ended (failed) with the partition running
				}
				panic(err) // the log is local: a read cannot fail
			}
			p.mu.Lock()
			p.n += len(evs)
			if !rig.count {
				p.evs = append(p.evs, evs...)
			}
			if c, ok := r.(source.Copying); ok {
				// Done once: a copy done may begin again (a partition
				// attached to the table).
				was := p.copied.Done
				if p.copied = c.Copied(); was && !p.copied.Done {
					p.begun++
				}
				if p.copied.Done {
					select {
					case <-p.finished:
					default:
						close(p.finished)
					}
				}
			}
			p.mu.Unlock()
			if len(ddls) > 0 && r.Position() >= upTo {
				p.mu.Lock()
				p.evs = append(p.evs, ddls[0])
				p.mu.Unlock()
				r.(source.DDLStepper).StepOver(ddls[0].CommitTs)
				continue
			}
			if len(evs) == 0 {
				select {
				case <-changed:
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
	}()
	return p
}

// held says the partition pauses: it copied holdAt rows, not all, and
// no chunk's rows are half returned.
func (p *partition) held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holdAt <= 0 || p.copied.Done || p.copied.Rows < p.holdAt {
		return false
	}
	pt, ok := p.r.(source.Parted)
	return !ok || !pt.Inside()
}

// release resumes a held partition.
func (p *partition) release() {
	p.mu.Lock()
	p.holdAt = 0
	p.mu.Unlock()
}

// whenCopying returns p once it has copied some of its range, not all.
func (rig *copyRig) whenCopying(p *partition) *partition {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		c := p.copied
		p.mu.Unlock()
		if c.To != "" && !c.Done {
			return p
		}
	}
	panic("the partition did not start copying")
}

// stopAt stops the partition gracefully: where it stands, and its copy's
// progress there.
func (p *partition) stopAt(t *testing.T) (model.Ts, model.CopyProgress) {
	close(p.quit)
	<-p.done
	return p.r.Position(), p.r.(source.Copying).Copied()
}

// stopped stops the partition (if it runs) and returns what it read.
func (p *partition) stopped(t testing.TB) []source.Event {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evs
}

func (p *partition) copiedRows() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.copied.Rows
}

// waitDone waits until the partition's copy is done, or it was stopped.
func (p *partition) waitDone(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
	case <-p.finished:
	case <-time.After(90 * time.Second):
		p.mu.Lock()
		c := p.copied
		p.mu.Unlock()
		t.Fatalf("the copy of %s did not finish: %+v", p.span, c)
	}
}

// has says a row with this key (text form) was read.
func (p *partition) has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.evs {
		if p.evs[i].Kind == source.KindDML && textKey(&p.evs[i]) == key {
			return true
		}
	}
	return false
}

// progress is the partition's copy progress as last read.
func (p *partition) progress() model.CopyProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.copied
}

// waitCopiedAgain waits until the partition's copy has begun again n
// times since it was first done and is done again, failing the test if
// it begins more often or not within a minute.
func (p *partition) waitCopiedAgain(t testing.TB, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		begun, c := p.begun, p.copied
		p.mu.Unlock()
		if begun == n && c.Done {
			return
		}
		if time.Now().After(deadline) || begun > n {
			t.Fatalf("the copy began again %d times, want %d; progress %+v", begun, n, c)
		}
	}
}
