// Package actor holds a partition's state behind seed 003's Actor
// interface: what a partition needs to resume exactly somewhere else, as
// bytes that a CheckpointStore keeps between nodes, and how that state is
// cut in two when the partition is split.
//
// The seed's Receive and Replay take requests and WAL entries. In this
// engine the source is the log: a partition's state is its key range and
// the position up to which its events are durable in the sink (the sinks
// keep no per-key state), and "replay" is reading the source again from
// that position. So Receive here takes a flushed position, and there is
// no separate Replay.
//
// It imports model only.
package actor

import (
	"encoding/json"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Actor is one partition's state.
type Actor interface {
	// Receive records that everything up to pos is durable in the sink.
	Receive(pos model.Ts)
	// Snapshot serializes the state, for a CheckpointStore.
	Snapshot() ([]byte, error)
	// Restore replaces the state with a snapshot.
	Restore(state []byte) error
	// Split keeps the lower half [start, key) and returns the state of
	// the upper half [key, end); both are at the same position.
	Split(key string) (upperHalf []byte, err error)
	// Span and Position say what the state covers and how far.
	Span() model.Span
	Position() model.Ts
}

// Replication is the built-in actor of a replicating partition.
type Replication struct {
	state replicationState
}

type replicationState struct {
	Version  int        `json:"version"`
	Span     model.Span `json:"span"`
	Position model.Ts   `json:"position"`
}

// NewReplication is the state of a partition over span, durable up to pos.
func NewReplication(span model.Span, pos model.Ts) *Replication {
	return &Replication{state: replicationState{Version: 1, Span: span, Position: pos}}
}

func (r *Replication) Receive(pos model.Ts) {
	if pos > r.state.Position {
		r.state.Position = pos
	}
}

func (r *Replication) Snapshot() ([]byte, error) { return json.Marshal(r.state) }

func (r *Replication) Restore(b []byte) error {
	var s replicationState
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("partition state does not decode: %w", err)
	}
	if s.Version != 1 {
		return fmt.Errorf("partition state version %d; this build reads version 1", s.Version)
	}
	r.state = s
	return nil
}

func (r *Replication) Split(key string) ([]byte, error) {
	if err := r.state.Span.ValidSplitKey(key); err != nil {
		return nil, err
	}
	upper := r.state
	upper.Span.Start = key
	b, err := json.Marshal(upper)
	if err != nil {
		return nil, err
	}
	r.state.Span.End = key
	return b, nil
}

func (r *Replication) Span() model.Span   { return r.state.Span }
func (r *Replication) Position() model.Ts { return r.state.Position }
