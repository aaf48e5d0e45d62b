package exec

import (
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
