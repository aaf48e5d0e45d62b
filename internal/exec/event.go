package exec

import (
	"sort"
	"time"

	"github.com/cdcctl/cdcctl/internal/plan"
)

// EventType names what happened.
type EventType string

const (
	EventSubmitted EventType = "submitted"
	EventStep      EventType = "step"
	EventReplanned EventType = "replanned"
	EventStalled   EventType = "stalled"
	EventPaused    EventType = "paused"
	EventResumed   EventType = "resumed"
	EventDone      EventType = "done"
	EventFailed    EventType = "failed"
	EventCancelled EventType = "cancelled"
)

// Terminal tells whether an event ends its plan's stream.
func (t EventType) Terminal() bool { return t == EventDone || t == EventFailed || t == EventCancelled }

// Event is one thing that happened to a plan. The terminal UI, the plain
// lines and NDJSON all render the same events.
type Event struct {
	Version int       `json:"version"`
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Plan    string    `json:"plan"`
	Type    EventType `json:"type"`
	// Batch, Index and Step: for step and replanned events.
	Batch   int        `json:"batch,omitempty"`
	Index   int        `json:"index,omitempty"`
	Step    *plan.Step `json:"step,omitempty"`
	State   StepState  `json:"state,omitempty"`
	Message string     `json:"message,omitempty"`
	// Progress: steps done (or skipped), running, and in all, after it.
	Progress *Progress `json:"progress,omitempty"`
}

// Progress counts a plan's steps.
type Progress struct {
	Done    int `json:"done"`
	Running int `json:"running"`
	Total   int `json:"total"`
}

// Delta returns the events that take a watcher who saw prev to cur: the
// notable events logged since, and a step event for every step whose
// state changed (a watcher that polls may miss a state a step passed
// through, never the state it is in). prev nil: everything so far.
func Delta(prev, cur *Record) []Event {
	var out []Event
	var lastSeq uint64
	if prev != nil {
		lastSeq = prev.Seq
	}
	if prev == nil || prev.ID != cur.ID {
		prev = &Record{}
	}
	for i, s := range cur.Steps {
		if i < len(prev.Steps) && prev.Steps[i].State == s.State && prev.Steps[i].Since.Equal(s.Since) {
			continue
		}
		if s.State == StepPending && i >= len(prev.Steps) {
			continue // not begun: nothing to tell yet
		}
		st := cur.Step(s)
		out = append(out, Event{Version: 1, Seq: cur.Seq, Time: s.Since, Plan: cur.ID, Type: EventStep, Batch: s.Batch, Index: s.Index,
			Step: &st, State: s.State, Message: s.Note})
	}
	for _, ev := range cur.Log {
		if ev.Seq > lastSeq {
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	// The terminal event comes last, whatever its time.
	for i, ev := range out {
		if ev.Type.Terminal() && i != len(out)-1 {
			out = append(append(out[:i:i], out[i+1:]...), ev)
			break
		}
	}
	c := cur.Counts()
	for i := range out {
		if out[i].Type == EventStep {
			out[i].Progress = &Progress{Done: c[StepDone] + c[StepSkipped], Running: c[StepRunning], Total: len(cur.Steps)}
		}
	}
	return out
}
