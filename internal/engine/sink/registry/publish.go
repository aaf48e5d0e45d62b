package registry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Publisher tells changefeeds' consumers how far they are complete: each
// checkpoint a maintainer persists goes to its sink's WriteCheckpoint
// (the storage sink's root metadata file, TiCDC's checkpoint-ts; the
// Kafka sink's canal-json WATERMARK in every partition). Everything up to
// a persisted checkpoint is flush-acked, so it lands before the mark.
// Writes happen in the background, one at a time per sink and the newest
// checkpoint only: a slow or failing sink never holds up the maintainer
// or another sink, and falls at most one write behind. A sink is written
// at most every publishEvery: maintainers persist small changefeeds'
// checkpoints ten times a second, and each write here is an object
// stored (a request billed) or a message in every Kafka partition.
type Publisher struct {
	log  *slog.Logger
	open func(ctx context.Context, uri string) (sink.Sink, error)

	mu    sync.Mutex
	sinks map[string]*published // by sink URI
	wake  chan struct{}
}

type published struct {
	want, written model.Ts
	writing       bool
	sink          sink.Sink // nil until opened
	used          time.Time
	began         time.Time // the last write's start
}

// publishEvery is the least time between two checkpoint writes to one
// sink.
const publishEvery = time.Second

// publisherIdle closes a sink no checkpoint went to for this long (its
// changefeed was removed, or its maintainer moved away).
const publisherIdle = 10 * time.Minute

// NewPublisher returns a publisher that opens sinks with env; Run
// writes what it is handed.
func NewPublisher(env Env) *Publisher {
	return &Publisher{log: env.Log, sinks: map[string]*published{}, wake: make(chan struct{}, 1),
		open: func(ctx context.Context, uri string) (sink.Sink, error) { return Open(ctx, uri, env) }}
}

// Publish hands over a changefeed's persisted checkpoint. It never
// blocks.
func (p *Publisher) Publish(sinkURI string, ts model.Ts) {
	p.mu.Lock()
	ps := p.sinks[sinkURI]
	if ps == nil {
		ps = &published{}
		p.sinks[sinkURI] = ps
	}
	ps.want = max(ps.want, ts)
	ps.used = time.Now()
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run writes checkpoints until ctx ends, then closes its sinks.
func (p *Publisher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer p.closeAll(&wg)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	// due wakes the loop when a sink held back by publishEvery may be
	// written; stopped while none is.
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-due.C:
		case <-t.C:
			p.closeIdle()
			continue
		}
		if wait := p.startWrites(ctx, &wg); wait > 0 {
			due.Reset(wait)
		}
	}
}

// startWrites starts a write for every sink with a newer checkpoint, no
// write under way and none begun within publishEvery; it returns how
// long until the first sink held back by that may be written (0: none).
func (p *Publisher) startWrites(ctx context.Context, wg *sync.WaitGroup) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var wait time.Duration
	now := time.Now()
	for uri, ps := range p.sinks {
		if ps.writing || ps.want <= ps.written {
			continue
		}
		if w := publishEvery - now.Sub(ps.began); w > 0 {
			if wait == 0 || w < wait {
				wait = w
			}
			continue
		}
		ps.writing, ps.began = true, now
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.write(ctx, uri, ps)
		}()
	}
	return wait
}

func (p *Publisher) write(ctx context.Context, uri string, ps *published) {
	p.mu.Lock()
	s, ts := ps.sink, ps.want
	p.mu.Unlock()
	var err error
	if s == nil {
		s, err = p.open(ctx, uri)
	}
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = s.WriteCheckpoint(wctx, ts)
		cancel()
	}
	p.mu.Lock()
	ps.writing = false
	if s != nil {
		ps.sink = s
	}
	if err == nil {
		ps.written = max(ps.written, ts)
	}
	again := ps.want > ps.written && err == nil
	p.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		p.log.Warn("could not tell the sink's consumers the checkpoint; the next checkpoint tries again", "checkpoint", ts, "err", err)
	}
	if again {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func (p *Publisher) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uri, ps := range p.sinks {
		if !ps.writing && time.Since(ps.used) > publisherIdle {
			if ps.sink != nil {
				_ = ps.sink.Close()
			}
			delete(p.sinks, uri)
		}
	}
}

func (p *Publisher) closeAll(wg *sync.WaitGroup) {
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for uri, ps := range p.sinks {
		if ps.sink != nil {
			_ = ps.sink.Close()
		}
		delete(p.sinks, uri)
	}
}
