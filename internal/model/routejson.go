package model

import (
	"encoding/json"
	"time"
)

// DecodeRouteEntry decodes a stored routing entry as json.Unmarshal does.
// Every node's view decodes every routing entry written, and a drain of
// 20,000 partitions writes each of its 6,700 moves twice: with encoding/json
// that was 7 % of the cluster's CPU during the drain. The exact form
// json.Marshal writes is read by hand (jsonscan.go); any other JSON goes
// to encoding/json, so the result never differs.
func DecodeRouteEntry(b []byte) (RouteEntry, error) {
	if r, ok := decodeRouteFast(b); ok {
		return r, nil
	}
	var r RouteEntry
	err := json.Unmarshal(b, &r)
	return r, err
}

func decodeRouteFast(b []byte) (RouteEntry, bool) {
	s := jsonScan{b: b, ok: true}
	var r RouteEntry
	s.lit(`{"id":`)
	r.ID = s.str()
	s.lit(`,"changefeed":`)
	r.Changefeed = ChangefeedID(s.str())
	s.lit(`,"span":{"table":`)
	r.Span.Table = s.str()
	s.lit(`,"start":`)
	r.Span.Start = s.str()
	s.lit(`,"end":`)
	r.Span.End = s.str()
	if s.field(`,"key":`) {
		r.Span.Key = s.str()
	}
	if s.field(`,"key_columns":`) {
		r.Span.KeyColumns = s.str()
	}
	s.lit("}")
	if s.field(`,"node":`) {
		r.Node = NodeID(s.str())
	}
	s.lit(`,"status":`)
	r.Status = PartitionStatus(s.str())
	s.lit(`,"epoch":`)
	r.Epoch = s.uint()
	if s.field(`,"target":`) {
		r.Target = NodeID(s.str())
	}
	if s.field(`,"start":`) {
		r.Start = Ts(s.uint())
	}
	if s.field(`,"start_copy":`) {
		r.StartCopy = s.copyProgress()
	}
	if s.field(`,"since":`) {
		r.Since = Ts(s.uint())
	}
	if s.field(`,"split_key":`) {
		r.SplitKey = s.str()
	}
	if s.field(`,"busy_since":`) {
		r.BusySince = s.time()
	}
	if s.field(`,"pinned":`) {
		s.lit("true")
		r.Pinned = true
	}
	if s.field(`,"history":[`) {
		for s.ok {
			r.History = append(r.History, s.partitionEvent())
			if !s.field(",") {
				break
			}
		}
		s.lit("]")
	}
	s.lit("}")
	if !s.ok || s.i != len(b) {
		return RouteEntry{}, false
	}
	return r, true
}

func (s *jsonScan) partitionEvent() PartitionEvent {
	var e PartitionEvent
	s.lit(`{"time":`)
	e.Time = s.time()
	s.lit(`,"kind":`)
	e.Kind = s.str()
	if s.field(`,"epoch":`) {
		e.Epoch = s.uint()
	}
	if s.field(`,"from":`) {
		e.From = NodeID(s.str())
	}
	if s.field(`,"to":`) {
		e.To = NodeID(s.str())
	}
	if s.field(`,"detail":`) {
		e.Detail = s.str()
	}
	if s.field(`,"graceful":`) {
		s.lit("true")
		e.Graceful = true
	}
	if s.field(`,"busy_ns":`) {
		e.Busy = time.Duration(s.int())
	}
	s.lit("}")
	return e
}
