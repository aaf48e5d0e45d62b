package model

import (
	"bytes"
	"encoding/json"
)

// ProgressEntry is one partition's position in a stored positions table.
type ProgressEntry struct {
	Partition string
	Progress  Progress
}

// DecodeProgressEntries decodes a stored positions table (a progress
// shard) as json.Unmarshal into a ProgressTable does, as a list (a key
// given twice: the last counts, as in the map). Every node's view decodes
// every shard a maintainer writes, and in a drain of 20,000 partitions
// that was 9 % of the cluster's CPU, most of it encoding/json's
// reflection and a map for records of one or two partitions, which the
// view then copies into a map of its own. The exact form json.Marshal
// writes (no spaces, fields in declaration order, omitted when empty) is
// read by hand; any other JSON goes to encoding/json, so the result never
// differs.
func DecodeProgressEntries(b []byte) ([]ProgressEntry, error) {
	if es, ok := decodeProgressFast(b); ok {
		return es, nil
	}
	var t ProgressTable
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, err
	}
	es := make([]ProgressEntry, 0, len(t))
	for pid, p := range t {
		es = append(es, ProgressEntry{pid, p})
	}
	return es, nil
}

func decodeProgressFast(b []byte) ([]ProgressEntry, bool) {
	s := jsonScan{b: b, ok: true}
	s.lit("{")
	t := make([]ProgressEntry, 0, bytes.Count(b, []byte(`{"checkpoint":`)))
	if s.peek('}') {
		s.i++
	} else {
		for s.ok {
			pid := s.str()
			s.lit(":")
			p := s.progress()
			if !s.ok {
				return nil, false
			}
			t = append(t, ProgressEntry{pid, p})
			if s.peek(',') {
				s.i++
				continue
			}
			s.lit("}")
			break
		}
	}
	if !s.ok || s.i != len(b) {
		return nil, false
	}
	return t, true
}

// progress reads one Progress: its fields in order, the optional ones
// only when json.Marshal writes them.
func (s *jsonScan) progress() Progress {
	var p Progress
	s.lit(`{"checkpoint":`)
	p.Checkpoint = Ts(s.uint())
	s.lit(`,"node":`)
	p.Node = NodeID(s.str())
	s.lit(`,"epoch":`)
	p.Epoch = s.uint()
	if s.field(`,"final":`) {
		s.lit("true")
		p.Final = true
	}
	if s.field(`,"handover":`) {
		s.lit("true")
		p.Handover = true
	}
	if s.field(`,"copy":`) {
		p.Copy = s.copyProgress()
	}
	s.lit("}")
	return p
}

// copyProgress reads a CopyProgress that is not zero.
func (s *jsonScan) copyProgress() CopyProgress {
	var c CopyProgress
	s.lit("{")
	sep := ""
	if s.field(`"to":`) {
		c.To, sep = s.str(), ","
	}
	if s.field(sep + `"done":`) {
		s.lit("true")
		c.Done, sep = true, ","
	}
	if s.field(sep + `"rows":`) {
		c.Rows, sep = s.int(), ","
	}
	if s.field(sep + `"key":`) {
		c.Key, sep = s.str(), ","
	}
	if s.field(sep + `"cursor":`) {
		c.Cursor, sep = s.str(), ","
	}
	if s.field(sep + `"read":`) {
		c.Read, sep = s.int(), ","
	}
	if s.field(sep + `"order":`) {
		c.Order, sep = s.str(), ","
	}
	if s.field(sep + `"only":`) {
		c.Only, sep = s.str(), ","
	}
	if s.field(sep + `"then":`) {
		c.Then, sep = s.str(), ","
	}
	if s.field(sep + `"again":`) {
		c.Again, sep = Ts(s.uint()), ","
	}
	if s.field(sep + `"horizon":`) {
		c.Horizon, sep = s.str(), ","
	}
	if s.field(sep + `"reattached":`) {
		c.Reattached = Ts(s.uint())
	}
	s.lit("}")
	return c
}
