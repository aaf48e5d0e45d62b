package registry

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/bucket"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/engine/sink/storage"
	"github.com/cdcctl/cdcctl/internal/model"
)

// counted counts a sink's checkpoint writes.
type counted struct {
	sink.Sink
	n *atomic.Int64
}

func (c counted) WriteCheckpoint(ctx context.Context, ts model.Ts) error {
	c.n.Add(1)
	return c.Sink.WriteCheckpoint(ctx, ts)
}

// Maintainers persist a small changefeed's checkpoint up to ten times a
// second; its sink's consumers are told at most once a second (each time
// an object stored on S3, or a message in every Kafka partition), and
// always the newest checkpoint in the end.
func TestASinkIsToldTheNewestCheckpointAtMostOnceASecond(t *testing.T) {
	dir := t.TempDir()
	uri := "file://" + dir
	var writes atomic.Int64
	p := NewPublisher(Env{})
	p.open = func(ctx context.Context, uri string) (sink.Sink, error) {
		s, err := Open(ctx, uri, Env{})
		if err != nil {
			return nil, err
		}
		return counted{s, &writes}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	began := time.Now()
	var last model.Ts
	for i := range 30 {
		last = model.TsFromTime(began.Add(time.Duration(i) * time.Second))
		p.Publish(uri, last)
		time.Sleep(50 * time.Millisecond)
	}
	b, err := bucket.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := storage.ReadCheckpoint(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		if model.Ts(got) == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the metadata file holds %v, not the newest checkpoint %v", model.Ts(got), last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Writes begin at least publishEvery apart: within the time taken,
	// no more than one per publishEvery and the first.
	took := time.Since(began)
	if most := int64(took/time.Second) + 1; writes.Load() > most {
		t.Fatalf("30 checkpoints in %v were written %d times; at most %d (one a second)", took.Round(time.Millisecond), writes.Load(), most)
	}
	if writes.Load() < 2 {
		t.Fatalf("written %d times; the newest after the first must have been written too", writes.Load())
	}
}
