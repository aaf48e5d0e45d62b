// Package blackhole is the sink that counts and drops, for benchmarks.
package blackhole

import (
	"context"
	"sync/atomic"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Sink counts rows and DDLs; every batch is durable at once.
type Sink struct {
	rows, ddls atomic.Uint64
}

// New returns a blackhole sink.
func New() *Sink { return &Sink{} }

func (s *Sink) Write(_ context.Context, b *sink.Batch) error {
	s.rows.Add(uint64(len(b.Events)))
	if b.OnFlushed != nil {
		b.OnFlushed(nil)
	}
	return nil
}

func (s *Sink) Flush(context.Context, string) error { return nil }

func (s *Sink) WriteDDL(context.Context, row.Event) error {
	s.ddls.Add(1)
	return nil
}

func (s *Sink) WriteCheckpoint(context.Context, model.Ts) error { return nil }

func (s *Sink) Close() error { return nil }

// Rows is how many rows were dropped.
func (s *Sink) Rows() uint64 { return s.rows.Load() }

// DDLs is how many DDLs were dropped.
func (s *Sink) DDLs() uint64 { return s.ddls.Load() }
