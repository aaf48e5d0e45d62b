package plan

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Pre-checks: before a plan is submitted, what in the cluster makes it
// risky, CockroachDB's decommission pre-check in spirit ("ranges blocking
// decommission detected", listed, before anything moves). A blocker
// refuses the submission unless the operator says --checks=skip; a
// warning is shown and, under --checks=strict, refuses too.

// CheckMode is how pre-checks treat a plan (--checks).
type CheckMode string

const (
	// ChecksEnabled (the default): blockers refuse, warnings are shown.
	ChecksEnabled CheckMode = "enabled"
	// ChecksStrict: warnings refuse too.
	ChecksStrict CheckMode = "strict"
	// ChecksSkip: no check runs.
	ChecksSkip CheckMode = "skip"
)

// ParseCheckMode reads --checks.
func ParseCheckMode(s string) (CheckMode, error) {
	switch m := CheckMode(s); m {
	case ChecksEnabled, ChecksStrict, ChecksSkip:
		return m, nil
	}
	return "", fmt.Errorf("--checks %q: want strict, enabled or skip", s)
}

// Severity says whether a finding refuses the plan.
type Severity string

const (
	Blocker Severity = "blocker"
	Warning Severity = "warning"
)

// The checks, by the names findings carry (docs/cli.md lists them).
const (
	CheckDrainRunning = "drain-running"
	CheckFailing      = "changefeed-failing"
	CheckLagging      = "changefeed-lagging"
	CheckRetention    = "retention"
	CheckLastCapture  = "last-capture"
	CheckHeadroom     = "headroom"
)

// Finding is one thing a pre-check found, about one subject.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	Subject  string   `json:"subject"`
	Message  string   `json:"message"`
	Hint     string   `json:"hint"`
}

// Health is what pre-checks know of a changefeed beyond the snapshot.
type Health struct {
	State model.ChangefeedState
	Lag   time.Duration
	// Error is why a normal changefeed does not advance (it is retried).
	Error string
	// Source is its upstream's side; nil when it has none (the
	// generator) or it was not asked.
	Source *SourceHealth
}

// SourceHealth is what a database source says of the log it keeps for a
// changefeed.
type SourceHealth struct {
	// RetentionSeconds: the upstream keeps its log this long whatever the
	// changefeed needs (MySQL's binary log expiry); 0 when not bounded.
	RetentionSeconds int64
	// RetainedBytes is the log kept for the changefeed; SafeBytes, how
	// much more may be written before the upstream gives it up
	// (PostgreSQL's safe_wal_size under max_slot_wal_keep_size; nil when
	// unbounded); WALStatus, PostgreSQL's wal_status of the slot.
	RetainedBytes int64
	SafeBytes     *int64
	WALStatus     string
	// Err: it could not be asked.
	Err string
}

// CheckInput is what pre-checks read: the snapshot the plan was made
// from, the health of its changefeeds, and the plan's lag budget.
type CheckInput struct {
	Snapshot *model.Snapshot
	Health   map[model.ChangefeedID]Health
	MaxLag   time.Duration
}

// LagWarning is the lag over which a plan without a budget is warned of
// a changefeed it acts on.
const LagWarning = time.Minute

// PreCheck runs every pre-check on p; the findings are ordered blockers
// first, then by check and subject.
func PreCheck(in CheckInput, p *Plan) []Finding {
	var out []Finding
	out = append(out, checkDrainRunning(in, p)...)
	out = append(out, checkChangefeeds(in, p)...)
	out = append(out, checkCaptures(in, p)...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Severity != out[j].Severity {
			return out[i].Severity == Blocker
		}
		if out[i].Check != out[j].Check {
			return out[i].Check < out[j].Check
		}
		return out[i].Subject < out[j].Subject
	})
	return out
}

// Refuses says whether the findings refuse the plan under mode.
func Refuses(mode CheckMode, fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == Blocker && mode != ChecksSkip || mode == ChecksStrict {
			return true
		}
	}
	return false
}

// Changefeeds are the changefeeds p's steps name, in order of first
// mention; none for a plan that names none (a drain of a capture with no
// work).
func (p *Plan) Changefeeds() []model.ChangefeedID {
	var out []model.ChangefeedID
	for _, b := range p.Batches {
		for _, s := range b.Steps {
			if id := model.ChangefeedID(s.Changefeed); id != "" && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

func checkDrainRunning(in CheckInput, p *Plan) []Finding {
	s := in.Snapshot
	if p.Kind == KindDrain || s.Draining == "" || s.DrainEnded {
		return nil
	}
	return []Finding{{Check: CheckDrainRunning, Severity: Blocker, Subject: string(s.Draining),
		Message: fmt.Sprintf("a drain of %s is running: this %s's moves would race with the drain's", s.Draining, p.Kind),
		Hint:    "wait for the drain to end ('cdcctl plan list', 'cdcctl drain status " + string(s.Draining) + "'), or cancel it"}}
}

// checkChangefeeds: those the plan acts on, failing, lagging, or with an
// upstream that would not keep their log through the plan.
func checkChangefeeds(in CheckInput, p *Plan) []Finding {
	var out []Finding
	pred := time.Duration(p.PredictedMillis) * time.Millisecond
	for _, id := range p.Changefeeds() {
		h, ok := in.Health[id]
		if !ok {
			continue
		}
		cf := string(id)
		switch {
		case h.State == model.ChangefeedFailed:
			out = append(out, Finding{Check: CheckFailing, Severity: Blocker, Subject: cf,
				Message: fmt.Sprintf("changefeed %s is failed%s: moving its work does not mend it, and nothing it moves can be proven", cf, because(h.Error)),
				Hint:    fmt.Sprintf("mend what failed it and 'cdcctl changefeed resume %s' (or remove it) first", cf)})
		case h.State == model.ChangefeedNormal && h.Error != "":
			out = append(out, Finding{Check: CheckFailing, Severity: Warning, Subject: cf,
				Message: fmt.Sprintf("changefeed %s does not advance: %s", cf, h.Error),
				Hint:    fmt.Sprintf("see 'cdcctl changefeed get %s'; its work moves, but it is not caught up", cf)})
		}
		if h.State == model.ChangefeedNormal {
			switch {
			case in.MaxLag > 0 && h.Lag > in.MaxLag:
				out = append(out, Finding{Check: CheckLagging, Severity: Blocker, Subject: cf,
					Message: fmt.Sprintf("changefeed %s lags %s, over --max-lag %s: the plan would be held before its first step", cf, round(h.Lag), in.MaxLag),
					Hint:    "let it catch up ('cdcctl changefeed wait " + cf + " --advance 1s'), raise --max-lag, or submit it held with --checks=skip"})
			case in.MaxLag == 0 && h.Lag > LagWarning:
				out = append(out, Finding{Check: CheckLagging, Severity: Warning, Subject: cf,
					Message: fmt.Sprintf("changefeed %s lags %s, and a plan's moves add to it", cf, round(h.Lag)),
					Hint:    "give the plan a lag budget (--max-lag) so that it waits while replication is behind"})
			}
		}
		if f, ok := retention(cf, h, pred); ok {
			out = append(out, f)
		}
	}
	return out
}

// retention: the upstream must keep the changefeed's log through the
// plan. The lag it may reach is its lag now plus the plan's predicted
// time (as if it advanced not at all meanwhile); less than half the
// retention left over that is a blocker, as is a PostgreSQL slot that has
// used more of max_slot_wal_keep_size than it has left.
func retention(cf string, h Health, pred time.Duration) (Finding, bool) {
	src := h.Source
	if src == nil {
		return Finding{}, false
	}
	if src.Err != "" {
		return Finding{Check: CheckRetention, Severity: Warning, Subject: cf,
			Message: fmt.Sprintf("changefeed %s: its source could not be asked how much log it keeps: %s", cf, src.Err),
			Hint:    fmt.Sprintf("see 'cdcctl changefeed get %s'", cf)}, true
	}
	if src.RetentionSeconds > 0 {
		keep := time.Duration(src.RetentionSeconds) * time.Second
		if expected := h.Lag + pred; 2*expected > keep {
			return Finding{Check: CheckRetention, Severity: Blocker, Subject: cf,
				Message: fmt.Sprintf("changefeed %s lags %s and the plan is predicted to take %s; its upstream keeps its binary log %s: less than half of that would be left", cf, round(h.Lag), round(pred), keep),
				Hint:    "let the changefeed catch up, or keep the binary log longer (binlog_expire_logs_seconds) before moving its work"}, true
		}
	}
	if src.WALStatus == "unreserved" || src.WALStatus == "lost" {
		return Finding{Check: CheckRetention, Severity: Blocker, Subject: cf,
			Message: fmt.Sprintf("changefeed %s: its replication slot is %s: PostgreSQL is about to remove (or removed) WAL it still needs", cf, src.WALStatus),
			Hint:    "let the changefeed catch up, or raise max_slot_wal_keep_size, before moving its work"}, true
	}
	if src.SafeBytes != nil && *src.SafeBytes < src.RetainedBytes {
		return Finding{Check: CheckRetention, Severity: Blocker, Subject: cf,
			Message: fmt.Sprintf("changefeed %s: its replication slot holds %s of WAL and PostgreSQL gives it up after %s more (max_slot_wal_keep_size): a plan that slows it can lose the slot", cf, bytesText(src.RetainedBytes), bytesText(*src.SafeBytes)),
			Hint:    "let the changefeed catch up, or raise max_slot_wal_keep_size, before moving its work"}, true
	}
	return Finding{}, false
}

// checkCaptures: where the work goes. A plan that leaves one capture
// running everything, or piles work on one capture, is a warning.
func checkCaptures(in CheckInput, p *Plan) []Finding {
	diff := Diff(in.Snapshot, p)
	var left []NodeDiff
	for _, d := range diff {
		if d.LivenessAfter == model.LivenessAlive.String() {
			left = append(left, d)
		}
	}
	var out []Finding
	if p.Kind == KindRollout && len(left) == 2 {
		out = append(out, Finding{Check: CheckLastCapture, Severity: Warning, Subject: string(left[0].Node) + ", " + string(left[1].Node),
			Message: fmt.Sprintf("while %s or %s restarts, the other takes all work: if it fails meanwhile, every changefeed stops", left[0].Node, left[1].Node),
			Hint:    "start a third capture first, or roll out in a maintenance window"})
	}
	if p.Kind == KindDrain && len(left) == 1 {
		n := left[0]
		out = append(out, Finding{Check: CheckLastCapture, Severity: Warning, Subject: string(n.Node),
			Message: fmt.Sprintf("after the drain %s is the only capture that takes work (%d maintainers, %d partitions): if it fails, every changefeed stops", n.Node, n.MaintainersAfter, n.PartitionsAfter),
			Hint:    "start another capture first, or drain in a maintenance window"})
	}
	if len(left) < 2 {
		return out
	}
	total := 0
	for _, d := range left {
		total += d.PartitionsAfter
	}
	for _, d := range left {
		othersMean := float64(total-d.PartitionsAfter) / float64(len(left)-1)
		gains := d.PartitionsAfter > d.PartitionsBefore || d.MaintainersAfter > d.MaintainersBefore
		if gains && d.PartitionsAfter >= 4 && float64(d.PartitionsAfter) > 2*othersMean {
			out = append(out, Finding{Check: CheckHeadroom, Severity: Warning, Subject: string(d.Node),
				Message: fmt.Sprintf("%s would run %d partitions (%d now), more than twice as many as the other captures that take work (%.1f each on average)", d.Node, d.PartitionsAfter, d.PartitionsBefore, othersMean),
				Hint:    "move work to the others first ('cdcctl partition rebalance --changefeed CF'), or start another capture"})
		}
	}
	return out
}

// RenderFindings writes findings for people, grouped by check, at most
// three subjects each: the blockers first, each group with its hint.
func RenderFindings(w io.Writer, mode CheckMode, fs []Finding) {
	if mode == ChecksSkip {
		fmt.Fprintln(w, "Pre-checks: skipped (--checks=skip)")
		return
	}
	if len(fs) == 0 {
		fmt.Fprintln(w, "Pre-checks: passed")
		return
	}
	blockers := 0
	for _, f := range fs {
		if f.Severity == Blocker {
			blockers++
		}
	}
	fmt.Fprintf(w, "Pre-checks: %s, %s", counted(blockers, "blocker"), counted(len(fs)-blockers, "warning"))
	if mode == ChecksStrict {
		fmt.Fprint(w, " (--checks=strict: warnings refuse too)")
	}
	fmt.Fprintln(w)
	for i := 0; i < len(fs); {
		j := i
		for j < len(fs) && fs[j].Check == fs[i].Check && fs[j].Severity == fs[i].Severity {
			j++
		}
		fmt.Fprintf(w, "  %s %s (%d):\n", strings.ToUpper(string(fs[i].Severity)), fs[i].Check, j-i)
		for k := i; k < j && k < i+3; k++ {
			fmt.Fprintf(w, "    %s\n", fs[k].Message)
		}
		if j-i > 3 {
			fmt.Fprintf(w, "    … and %d more\n", j-i-3)
		}
		fmt.Fprintf(w, "    fix: %s\n", fs[i].Hint)
		i = j
	}
}

func because(err string) string {
	if err == "" {
		return ""
	}
	return " (" + err + ")"
}

func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
