package exec

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// storedRecord is a two-step move plan's record as an older cdcctl
// stored it: its first step done, then its second one ended as state
// (with note), and the plan ended with the terminal event (in the words
// a cancel used), which counted every step that ended, skipped ones too,
// as done. stepSeqs: its steps
// keep the sequence number of the event that put them in their state
// (records stored before they did have none).
func storedRecord(state StepState, note, terminal string, stepSeqs bool) []byte {
	seq := func(n int) string {
		if !stepSeqs {
			return ""
		}
		return fmt.Sprintf(`,"seq":%d`, n)
	}
	message := "it ended"
	if terminal == string(EventCancelled) {
		message = "cancelled by request; steps already done stay done"
	}
	return fmt.Appendf(nil, `{"version":1,"id":"move-p7-1","plan":{"version":1,"id":"move-p7-1","kind":"move","target":"p7","batches":[
 {"steps":[{"kind":"move-partition","changefeed":"demo","partition":"p7","from":"capture-1","to":"capture-2","reason":"asked"}]},
 {"steps":[{"kind":"move-partition","changefeed":"demo","partition":"p8","from":"capture-1","to":"capture-2","reason":"asked"}]}]},
 "state":%q,"message":%q,
 "steps":[
  {"batch":0,"index":0,"state":"done","since":"2026-12-01T10:00:02Z","started":"2026-12-01T10:00:01Z","ended":"2026-12-01T10:00:02Z"%s},
  {"batch":1,"index":0,"state":%q,"since":"2026-12-01T10:00:09Z","ended":"2026-12-01T10:00:09Z","note":%q%s}],
 "submitted_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T10:00:09Z","finished_at":"2026-12-01T10:00:09Z","seq":6,
 "log":[
  {"version":1,"seq":1,"time":"2026-12-01T10:00:00Z","plan":"move-p7-1","type":"submitted","message":"move p7: 2 batches, 2 steps","progress":{"done":0,"running":0,"total":2}},
  {"version":1,"seq":4,"time":"2026-12-01T10:00:03Z","plan":"move-p7-1","type":"held","message":"changefeed demo lags 1m0s","progress":{"done":1,"running":0,"total":2}},
  {"version":1,"seq":6,"time":"2026-12-01T10:00:09Z","plan":"move-p7-1","type":%q,"message":%q,"progress":{"done":2,"running":0,"total":2}}],
 "progress_at":"2026-12-01T10:00:09Z"}`, terminal, message, seq(3), state, note, seq(5), terminal, message)
}

// A record stored before skipped steps were counted apart from done is
// read as it would be stored now: its logged events count the steps
// skipped by then as skipped, so a late watcher of a drain that failed
// held past its --hold-timeout does not read "[2/2 done]" on its last
// line, nor plan show -o json in its log.
func TestAStoredRecordsEventsCountItsSkippedStepsApart(t *testing.T) {
	for _, stepSeqs := range []bool{true, false} {
		rec, err := Decode(storedRecord(StepSkipped, "held past --hold-timeout", "failed", stepSeqs))
		if err != nil {
			t.Fatal(err)
		}
		evs := Delta(nil, rec)
		var got []string
		for _, ev := range evs {
			b, _ := json.Marshal(ev.Progress)
			got = append(got, string(ev.Type)+" "+string(b))
		}
		want := fmt.Sprint([]string{
			`submitted {"done":0,"running":0,"total":2}`,
			`step {"done":1,"running":0,"total":2}`,
			`held {"done":1,"running":0,"total":2}`,
			`step {"done":1,"skipped":1,"running":0,"total":2}`,
			`failed {"done":1,"skipped":1,"running":0,"total":2}`,
		})
		if fmt.Sprint(got) != want {
			t.Errorf("steps with seqs %v: a late watcher gets\n%s\nwant\n%s", stepSeqs, got, want)
		}
	}
}

// A plan cancelled before cancelled steps had their own state was stored
// with them skipped, noted "cancelled": read back, they are cancelled,
// and its events count them so, as those of a plan cancelled now. It
// used to read 'skipped (cancelled) [1/2 done, 1 skipped]'.
func TestACancelledStepStoredSkippedIsReadCancelled(t *testing.T) {
	// The same plan cancelled now: p7 moved, p8 moving.
	w, c := newWorld(), &clock{t: time.Unix(1000, 0)}
	x := &Executor{Act: w, Now: c.now}
	old, err := Decode(storedRecord(StepSkipped, "cancelled", "cancelled", true))
	if err != nil {
		t.Fatal(err)
	}
	now := New("move-p7-1", &old.Plan, "ops", c.t)
	run(t, x, now, RequestNone)
	w.finish()
	run(t, x, now, RequestNone)
	run(t, x, now, RequestCancel)

	shown := func(r *Record) []string {
		var out []string
		for _, ev := range Delta(nil, r) {
			if ev.Type == EventStep && ev.State != StepDone || ev.Type.Terminal() {
				b, _ := json.Marshal(ev.Progress)
				out = append(out, fmt.Sprintf("%s %s (%s) %s", ev.Type, ev.State, ev.Message, b))
			}
		}
		return out
	}
	want := fmt.Sprint([]string{
		`step cancelled () {"done":1,"cancelled":1,"running":0,"total":2}`,
		`cancelled  (cancelled by request; steps already done stay done) {"done":1,"cancelled":1,"running":0,"total":2}`,
	})
	if got := fmt.Sprint(shown(now)); got != want {
		t.Fatalf("a plan cancelled now shows\n%s\nwant\n%s", got, want)
	}
	for _, stepSeqs := range []bool{true, false} {
		old, err := Decode(storedRecord(StepSkipped, "cancelled", "cancelled", stepSeqs))
		if err != nil {
			t.Fatal(err)
		}
		if s := old.Steps[1]; s.State != StepCancelled || s.Note != "" {
			t.Errorf("steps with seqs %v: the stored step reads %s (%s)", stepSeqs, s.State, s.Note)
		}
		if got := fmt.Sprint(shown(old)); got != want {
			t.Errorf("steps with seqs %v: a plan stored cancelled before shows\n%s\nwant, as one cancelled now,\n%s", stepSeqs, got, want)
		}
	}
	// A step skipped for another reason, in a plan that was not
	// cancelled, stays skipped.
	if old, _ := Decode(storedRecord(StepSkipped, "cancelled", "failed", true)); old.Steps[1].State != StepSkipped {
		t.Errorf("a failed plan's skipped step reads %s", old.Steps[1].State)
	}
}
