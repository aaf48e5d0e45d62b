package exec

import (
	"encoding/json"
	"fmt"
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
	// EventHeld and EventUnheld: the lag budget held the plan before its
	// next step, and let it go on; EventBudget: the budget was changed.
	EventHeld   EventType = "held"
	EventUnheld EventType = "unheld"
	EventBudget EventType = "budget"
	// EventFailing: a step of the plan failed while others still run;
	// no step begins, and the plan fails once they have ended
	// (Record.Failing).
	EventFailing EventType = "failing"
)

// Terminal tells whether an event ends its plan's stream.
func (t EventType) Terminal() bool { return t == EventDone || t == EventFailed || t == EventCancelled }

// Event is one thing that happened to a plan. The terminal UI, the plain
// lines and NDJSON all render the same events.
type Event struct {
	Version int `json:"version"`
	// Seq numbers the events of one stream (an SSE stream, a watch's
	// NDJSON) from 1, without gaps or repeats (Stream.Next).
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Plan string    `json:"plan"`
	Type EventType `json:"type"`
	// Batch, Index and Step: for step and replanned events.
	Batch   int        `json:"batch,omitempty"`
	Index   int        `json:"index,omitempty"`
	Step    *plan.Step `json:"step,omitempty"`
	State   StepState  `json:"state,omitempty"`
	Message string     `json:"message,omitempty"`
	// Progress: steps done, skipped, cancelled, running, and in all,
	// after it.
	Progress *Progress `json:"progress,omitempty"`

	from StepState // a step event's state before it, as the watcher saw it
}

// MarshalJSON gives a step's batch and index always, the first's 0
// too: omitted when 0, the first step of a plan had neither.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	if e.Step == nil {
		return json.Marshal(plain(e))
	}
	return json.Marshal(struct {
		plain
		Batch int `json:"batch"`
		Index int `json:"index"`
	}{plain(e), e.Batch, e.Index})
}

// Stream is a watcher's numbering of the events it sends: a record's own
// sequence counts events it logs and some it does not, and a step event
// derived from a state change has none of its own, so a stream numbers
// what it sends.
type Stream struct {
	prev *Record
	n    uint64
}

// MaxEventID is the highest id a stream numbers an event with: the
// largest integer a JavaScript client (EventSource) holds exactly. A
// stream never gets near it by itself; a client's Last-Event-ID can.
const MaxEventID = 1<<53 - 1

// ErrEventID refuses a Last-Event-ID that no stream could have sent.
var ErrEventID = fmt.Errorf("an event id is a number from 0 to %d", uint64(MaxEventID))

// After makes a new stream number its events after n: a client that
// reconnects gets ids after the last it got. What it sends first is the
// record as it stands (its steps' states and logged events), since what
// the client saw is not known here. An n beyond MaxEventID is refused:
// the ids after it would wrap to 0, repeating ids the client has seen.
func (s *Stream) After(n uint64) error {
	if n > MaxEventID {
		return ErrEventID
	}
	s.n = n
	return nil
}

// Next returns the events that take the stream from the record it saw
// last to cur (Delta), numbered after the ones it sent.
func (s *Stream) Next(cur *Record) []Event {
	evs := Delta(s.prev, cur)
	for i := range evs {
		s.n++
		evs[i].Seq = s.n
	}
	rec := *cur
	rec.Steps = append(rec.Steps[:0:0], cur.Steps...) // the caller's record may change in place
	s.prev = &rec
	return evs
}

// Progress counts a plan's steps.
type Progress struct {
	Done int `json:"done"`
	// Skipped and Cancelled steps are not done: what a skipped step acts
	// on was removed, or the plan ended before it (abandoned, held past
	// its hold timeout); the plan was cancelled before a cancelled one.
	// Counted with done, a drain that stopped half-way read "[8/8 done]".
	Skipped   int `json:"skipped,omitempty"`
	Cancelled int `json:"cancelled,omitempty"`
	Running   int `json:"running"`
	Total     int `json:"total"`
}

// progress counts steps from their states (Record.Counts).
func progress(c map[StepState]int, total int) *Progress {
	return &Progress{Done: c[StepDone], Skipped: c[StepSkipped], Cancelled: c[StepCancelled], Running: c[StepRunning], Total: total}
}

// Delta returns the events that take a watcher who saw prev to cur: the
// notable events logged since, and a step event for every step whose
// state changed (a watcher that polls may miss a state a step passed
// through, never the state it is in). prev nil: everything so far.
func Delta(prev, cur *Record) []Event {
	var out []Event
	// at: the sequence number each event in out happened at, which
	// orders the events of the same instant (a step changed by the
	// resume logged just before it comes after it).
	var at []uint64
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
		from := StepPending
		if i < len(prev.Steps) {
			from = prev.Steps[i].State
		}
		out = append(out, Event{Version: 1, Seq: cur.Seq, Time: s.Since, Plan: cur.ID, Type: EventStep, Batch: s.Batch, Index: s.Index,
			Step: &st, State: s.State, Message: s.Note, from: from})
		at = append(at, s.Seq) // 0 in a record stored before steps kept it
	}
	for _, ev := range cur.Log {
		if ev.Seq > lastSeq {
			out = append(out, ev)
			at = append(at, ev.Seq)
		}
	}
	sort.Stable(byTime{out, at})
	// The terminal event comes last, whatever its time.
	for i, ev := range out {
		if ev.Type.Terminal() && i != len(out)-1 {
			out = append(append(out[:i:i], out[i+1:]...), ev)
			break
		}
	}
	// Each step event counts the steps as they stood after it, from what
	// the watcher saw before: a watcher that missed several changes gets
	// the counts growing line by line, not the latest on every line.
	c := prev.Counts()
	if len(prev.Steps) < len(cur.Steps) {
		c[StepPending] += len(cur.Steps) - len(prev.Steps)
	}
	for i := range out {
		if out[i].Type == EventStep {
			c[out[i].from]--
			c[out[i].State]++
			out[i].Progress = progress(c, len(cur.Steps))
		}
	}
	return out
}

// byTime orders events by their time, and those of the same instant by
// the sequence number they happened at.
type byTime struct {
	evs []Event
	at  []uint64
}

func (b byTime) Len() int { return len(b.evs) }
func (b byTime) Less(i, j int) bool {
	if ti, tj := b.evs[i].Time, b.evs[j].Time; !ti.Equal(tj) {
		return ti.Before(tj)
	}
	return b.at[i] < b.at[j]
}
func (b byTime) Swap(i, j int) {
	b.evs[i], b.evs[j] = b.evs[j], b.evs[i]
	b.at[i], b.at[j] = b.at[j], b.at[i]
}

// PausedFor is how long the plan has been paused in all, up to now, from
// its logged pause and resume events: the time that does not count
// towards its pace. A pause older than the log's window is not counted.
func (r *Record) PausedFor(now time.Time) time.Duration {
	var total time.Duration
	var since time.Time
	for _, ev := range r.Log {
		switch ev.Type {
		case EventPaused:
			if since.IsZero() {
				since = ev.Time
			}
		case EventResumed:
			if !since.IsZero() {
				total += ev.Time.Sub(since)
				since = time.Time{}
			}
		}
	}
	if !since.IsZero() {
		end := now
		if r.FinishedAt != nil {
			end = *r.FinishedAt
		}
		total += end.Sub(since)
	}
	return max(total, 0)
}
