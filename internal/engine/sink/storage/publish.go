package storage

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"gocloud.dev/blob"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Publisher writes changefeeds' checkpoints to the root metadata file of
// their storage sinks (TiCDC's checkpoint-ts): a consumer that trusts
// only that file reads every table complete up to it. A maintainer hands
// it each checkpoint it persists; writes happen in the background, the
// newest checkpoint per sink only, so a slow bucket never holds up the
// maintainer and never falls further behind than one write.
type Publisher struct {
	log *slog.Logger

	mu      sync.Mutex
	want    map[string]model.Ts // by sink URI: the newest checkpoint not written yet
	written map[string]model.Ts
	buckets map[string]*openBucket
	wake    chan struct{}
}

type openBucket struct {
	b    *blob.Bucket
	used time.Time
}

// publisherIdle closes a bucket no checkpoint went to for this long (its
// changefeed was removed, or its maintainer moved away).
const publisherIdle = 10 * time.Minute

// NewPublisher returns a publisher; Run writes what it is handed.
func NewPublisher(log *slog.Logger) *Publisher {
	return &Publisher{log: log, want: map[string]model.Ts{}, written: map[string]model.Ts{},
		buckets: map[string]*openBucket{}, wake: make(chan struct{}, 1)}
}

// Publish hands over a changefeed's persisted checkpoint. A sink that is
// not a storage sink is ignored. It never blocks.
func (p *Publisher) Publish(sinkURI string, ts model.Ts) {
	if _, err := ParseURI(sinkURI); err != nil {
		return
	}
	p.mu.Lock()
	if ts > p.written[sinkURI] && ts > p.want[sinkURI] {
		p.want[sinkURI] = ts
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run writes checkpoints until ctx ends, then closes its buckets.
func (p *Publisher) Run(ctx context.Context) {
	defer p.closeAll()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			p.writeAll(ctx)
		case <-t.C:
			p.closeIdle()
		}
	}
}

func (p *Publisher) writeAll(ctx context.Context) {
	p.mu.Lock()
	todo := p.want
	p.want = map[string]model.Ts{}
	p.mu.Unlock()
	for uri, ts := range todo {
		if err := p.write(ctx, uri, ts); err != nil {
			if ctx.Err() == nil {
				p.log.Warn("storage sink: could not write the metadata file; the next checkpoint tries again", "err", err)
			}
			continue
		}
		p.mu.Lock()
		p.written[uri] = max(p.written[uri], ts)
		p.mu.Unlock()
	}
}

func (p *Publisher) write(ctx context.Context, uri string, ts model.Ts) error {
	p.mu.Lock()
	ob := p.buckets[uri]
	p.mu.Unlock()
	if ob == nil {
		cfg, err := ParseURI(uri)
		if err != nil {
			return err
		}
		b, err := OpenBucket(ctx, cfg)
		if err != nil {
			return err
		}
		ob = &openBucket{b: b}
		p.mu.Lock()
		p.buckets[uri] = ob
		p.mu.Unlock()
	}
	p.mu.Lock()
	ob.used = time.Now()
	p.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return writeMetadata(wctx, ob.b, ts)
}

func (p *Publisher) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uri, ob := range p.buckets {
		if time.Since(ob.used) > publisherIdle {
			_ = ob.b.Close()
			delete(p.buckets, uri)
			delete(p.written, uri)
		}
	}
}

func (p *Publisher) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uri, ob := range p.buckets {
		_ = ob.b.Close()
		delete(p.buckets, uri)
	}
}

// writeMetadata writes the root metadata file: everything up to ts is
// in the bucket.
func writeMetadata(ctx context.Context, b *blob.Bucket, ts model.Ts) error {
	body, _ := json.Marshal(metadata{CheckpointTs: uint64(ts)})
	return b.WriteAll(ctx, metadataFile, body, &blob.WriterOptions{ContentType: "application/json"})
}
