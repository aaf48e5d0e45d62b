package plan

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// found lists findings as "severity check subject" for comparison.
func found(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Severity)+" "+f.Check+" "+f.Subject)
	}
	return out
}

func sameList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func TestPreChecksFindWhatMakesAPlanRisky(t *testing.T) {
	s := snapshot(3, map[string]string{"a": "capture-3", "b": "capture-3", "c": "capture-2"}, 6)
	drain, err := Drain(s, "capture-3", 1, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	if got := PreCheck(CheckInput{Snapshot: s}, drain); len(got) != 0 {
		t.Fatalf("a healthy cluster's drain: %+v", got)
	}
	safe, used := int64(1<<20), int64(3<<20)
	health := map[model.ChangefeedID]Health{
		"a": {State: model.ChangefeedFailed, Error: "sink refused: MESSAGE_TOO_LARGE"},
		"b": {State: model.ChangefeedNormal, Lag: 40 * time.Second, Source: &SourceHealth{RetentionSeconds: 60}},
		"c": {State: model.ChangefeedNormal, Lag: 2 * time.Second, Error: "source unreachable", Source: &SourceHealth{RetainedBytes: used, SafeBytes: &safe}},
	}
	fs := PreCheck(CheckInput{Snapshot: s, Health: health, MaxLag: 10 * time.Second}, drain)
	sameList(t, "a drain under a 10s budget", found(fs), []string{
		"blocker changefeed-failing a",
		"blocker changefeed-lagging b",
		"blocker retention b", // 40 s lag + the plan, twice, is over the 60 s kept
		"blocker retention c", // the slot has used more than it has left
		"warning changefeed-failing c",
	})
	for _, f := range fs {
		if f.Message == "" || f.Hint == "" {
			t.Fatalf("a finding without its message or hint: %+v", f)
		}
	}
	if !strings.Contains(fs[0].Message, "MESSAGE_TOO_LARGE") || !strings.Contains(fs[0].Hint, "changefeed resume a") {
		t.Fatalf("the failed changefeed's finding: %+v", fs[0])
	}
	if !strings.Contains(fs[3].Message, "3.0 MiB") || !strings.Contains(fs[3].Message, "1.0 MiB") {
		t.Fatalf("the slot's finding: %+v", fs[3])
	}

	// Without a budget a lag is a warning only past LagWarning; a slot
	// PostgreSQL calls unreserved is a blocker; a source not answering a
	// warning.
	health = map[model.ChangefeedID]Health{
		"a": {State: model.ChangefeedNormal, Lag: 2 * LagWarning, Source: &SourceHealth{WALStatus: "unreserved"}},
		"b": {State: model.ChangefeedNormal, Lag: LagWarning / 2, Source: &SourceHealth{Err: "connection refused"}},
		"c": {State: model.ChangefeedPaused, Lag: time.Hour},
	}
	sameList(t, "a drain without a budget", found(PreCheck(CheckInput{Snapshot: s, Health: health}, drain)), []string{
		"blocker retention a",
		"warning changefeed-lagging a",
		"warning retention b",
	})

	// A drain that leaves one capture to take work; a move while a drain
	// runs; a move that piles partitions on one capture.
	two := snapshot(2, map[string]string{"a": "capture-2"}, 4)
	d2, err := Drain(two, "capture-2", 1, DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	sameList(t, "a drain of two captures", found(PreCheck(CheckInput{Snapshot: two}, d2)), []string{"warning last-capture capture-1"})

	s.Draining = "capture-3"
	move, err := Move(s, "p1", "capture-2", DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	sameList(t, "a move during a drain", found(PreCheck(CheckInput{Snapshot: s}, move)), []string{"blocker drain-running capture-3"})
	s.DrainEnded = true
	sameList(t, "a move after a drain's plan ended", found(PreCheck(CheckInput{Snapshot: s}, move)), nil)

	piled := snapshot(3, map[string]string{"a": "capture-1"}, 6)
	for i := range piled.Partitions {
		piled.Partitions[i].Route.Node = "capture-1"
	}
	piled.Partitions[0].Route.Node, piled.Partitions[1].Route.Node = "capture-2", "capture-3"
	onto, err := Move(piled, "p3", "capture-2", DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	sameList(t, "a move onto a light capture", found(PreCheck(CheckInput{Snapshot: piled}, onto)), nil)
	back, err := Move(piled, "p1", "capture-1", DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	sameList(t, "a move onto the loaded capture", found(PreCheck(CheckInput{Snapshot: piled}, back)), []string{"warning headroom capture-1"})
}

func TestModesDecideWhatRefuses(t *testing.T) {
	warn := []Finding{{Check: CheckHeadroom, Severity: Warning}}
	block := []Finding{{Check: CheckDrainRunning, Severity: Blocker}}
	for _, c := range []struct {
		mode    CheckMode
		fs      []Finding
		refuses bool
	}{
		{ChecksEnabled, nil, false}, {ChecksEnabled, warn, false}, {ChecksEnabled, block, true},
		{ChecksStrict, nil, false}, {ChecksStrict, warn, true}, {ChecksStrict, block, true},
	} {
		if got := Refuses(c.mode, c.fs); got != c.refuses {
			t.Errorf("%s with %v: refuses %v, want %v", c.mode, c.fs, got, c.refuses)
		}
	}
	for _, s := range []string{"strict", "enabled", "skip"} {
		if m, err := ParseCheckMode(s); err != nil || string(m) != s {
			t.Errorf("%q: %v %v", s, m, err)
		}
	}
	if _, err := ParseCheckMode("on"); err == nil || !strings.Contains(err.Error(), "want strict, enabled or skip") {
		t.Errorf("--checks on: %v", err)
	}
}

func TestFindingsAreShownGroupedAFewLinesEach(t *testing.T) {
	var fs []Finding
	for _, cf := range []string{"a", "b", "c", "d", "e"} {
		fs = append(fs, Finding{Check: CheckFailing, Severity: Blocker, Subject: cf, Message: "changefeed " + cf + " is failed", Hint: "resume it"})
	}
	fs = append(fs, Finding{Check: CheckLastCapture, Severity: Warning, Subject: "capture-1", Message: "capture-1 alone", Hint: "start another"})
	var b bytes.Buffer
	RenderFindings(&b, ChecksEnabled, fs)
	want := `Pre-checks: 5 blockers, 1 warning
  BLOCKER changefeed-failing (5):
    changefeed a is failed
    changefeed b is failed
    changefeed c is failed
    … and 2 more
    fix: resume it
  WARNING last-capture (1):
    capture-1 alone
    fix: start another
`
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	RenderFindings(&b, ChecksEnabled, nil)
	if b.String() != "Pre-checks: passed\n" {
		t.Fatalf("no findings: %q", b.String())
	}
}
