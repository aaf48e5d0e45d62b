package exec

import (
	"encoding/json"
	"fmt"
	"testing"
)

// storedRecord is a two-step move plan's record as an older cdcctl
// stored it: its first step done, then its second one ended as state
// (with note), and the plan ended with the terminal event, which counted
// every step that ended, skipped ones too, as done. stepSeqs: its steps
// keep the sequence number of the event that put them in their state
// (records stored before they did have none).
func storedRecord(state StepState, note, terminal string, stepSeqs bool) []byte {
	seq := func(n int) string {
		if !stepSeqs {
			return ""
		}
		return fmt.Sprintf(`,"seq":%d`, n)
	}
	return fmt.Appendf(nil, `{"version":1,"id":"move-p7-1","plan":{"version":1,"id":"move-p7-1","kind":"move","target":"p7","batches":[
 {"steps":[{"kind":"move-partition","changefeed":"demo","partition":"p7","from":"capture-1","to":"capture-2","reason":"asked"}]},
 {"steps":[{"kind":"move-partition","changefeed":"demo","partition":"p8","from":"capture-1","to":"capture-2","reason":"asked"}]}]},
 "state":%q,"message":"it ended",
 "steps":[
  {"batch":0,"index":0,"state":"done","since":"2026-12-01T10:00:02Z","started":"2026-12-01T10:00:01Z","ended":"2026-12-01T10:00:02Z"%s},
  {"batch":1,"index":0,"state":%q,"since":"2026-12-01T10:00:09Z","ended":"2026-12-01T10:00:09Z","note":%q%s}],
 "submitted_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T10:00:09Z","finished_at":"2026-12-01T10:00:09Z","seq":6,
 "log":[
  {"version":1,"seq":1,"time":"2026-12-01T10:00:00Z","plan":"move-p7-1","type":"submitted","message":"move p7: 2 batches, 2 steps","progress":{"done":0,"running":0,"total":2}},
  {"version":1,"seq":4,"time":"2026-12-01T10:00:03Z","plan":"move-p7-1","type":"held","message":"changefeed demo lags 1m0s","progress":{"done":1,"running":0,"total":2}},
  {"version":1,"seq":6,"time":"2026-12-01T10:00:09Z","plan":"move-p7-1","type":%q,"message":"it ended","progress":{"done":2,"running":0,"total":2}}],
 "progress_at":"2026-12-01T10:00:09Z"}`, terminal, seq(3), state, note, seq(5), terminal)
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
