package exec

// A plan that is to fail while steps of it still run (Record.Failing).

import (
	"fmt"
	"time"
)

// fail fails the plan with msg: at once when none of its steps runs, or
// when the executor may not wait (true). Otherwise the steps running
// finish in the engine whatever the plan does: it fails once they have
// (failNow, from Advance), so that the record says how each ended; a
// failing event says so. A plan already failing keeps its first failure
// (what it fails with, and since when), and says nothing more.
func (x *Executor) fail(r *Record, msg string, now time.Time) (Event, bool) {
	running := r.Counts()[StepRunning]
	if f := r.Failing; f != nil {
		msg = f.Message
	}
	if running == 0 || !x.WaitForRunning {
		return r.finish(Failed, msg, now), true
	}
	if r.Failing != nil {
		return Event{}, false
	}
	r.Failing = &Failing{Since: now, Message: msg}
	return r.emit(now, Event{Type: EventFailing, Message: fmt.Sprintf("%s: no step begins; the plan fails once its %d running %s ended (at most %s)",
		msg, running, plural(running, "step has", "steps have"), failingWait)}, true), false
}

// failingWait bounds how long a plan that is to fail waits for the steps
// it left running (Record.Failing): a step stuck longer is left running
// in the record, and the plan fails.
const failingWait = 2 * time.Minute

// failNow ends a plan that waits to fail (Record.Failing) once none of
// its steps runs, or once it waited failingWait; ok false while it waits
// on, or when it is not failing.
func (r *Record) failNow(now time.Time) (Event, bool) {
	if r.Failing == nil {
		return Event{}, false
	}
	running := r.Counts()[StepRunning]
	switch {
	case running == 0:
		return r.finish(Failed, r.Failing.Message, now), true
	case now.Sub(r.Failing.Since) >= failingWait:
		return r.finish(Failed, fmt.Sprintf("%s (%d %s still running after %s: what %s began finishes in the engine, and the record shows %s running)",
			r.Failing.Message, running, plural(running, "step was", "steps were"), failingWait, plural(running, "it", "they"), plural(running, "it", "them")), now), true
	}
	return Event{}, false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
