// Package tui is the live view of a running plan (bubbletea): a header
// with the plan, its state, elapsed time and ETA; progress bars for
// maintainers and partitions still to move; a per-capture table; the
// batches and their steps; the event log. Keys: q detaches (the plan goes
// on), p pauses or resumes, c cancels after a confirmation.
//
// It reads the same exec events as the plain and NDJSON renderers, from a
// Source the CLI builds over the API client; it never imports the engine.
package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// NodeRow is one capture as the view shows it.
type NodeRow struct {
	Node        string
	Liveness    string
	Maintainers int
	Partitions  int
	Moves       int // moves in flight to or from it
}

// Frame is what one fetch brings: the plan's record and the captures.
type Frame struct {
	Record *exec.Record
	Nodes  []NodeRow
}

// Source fetches frames and sends operators' requests.
type Source interface {
	Fetch(ctx context.Context) (Frame, error)
	Request(ctx context.Context, req exec.Request) error
}

// Final wraps a fetch's error that waiting will not change (no such plan,
// a token refused): the view quits with it (Err) instead of showing it
// and fetching again until the caller's timeout.
func Final(err error) error { return finalError{err} }

type finalError struct{ err error }

func (e finalError) Error() string { return e.err.Error() }
func (e finalError) Unwrap() error { return e.err }

// Model is the live view.
type Model struct {
	src   Source
	now   func() time.Time
	every time.Duration

	frame    Frame
	started  time.Time
	events   []exec.Event
	confirm  bool   // asking whether to cancel
	status   string // the last request's outcome, or an error
	detached bool
	err      error // a final fetch error (Final), which ended the view
	width    int
}

// New returns the view of one plan; every is how often it fetches.
func New(src Source, now func() time.Time, every time.Duration) *Model {
	return &Model{src: src, now: now, every: every, width: 100}
}

// Detached tells whether the operator left with q (the plan goes on).
func (m *Model) Detached() bool { return m.detached }

// Record is the last record seen.
func (m *Model) Record() *exec.Record { return m.frame.Record }

// Err is the final error that ended the view (Final), unwrapped; nil
// otherwise.
func (m *Model) Err() error { return m.err }

type frameMsg struct {
	f   Frame
	err error
}

type requestMsg struct {
	req exec.Request
	err error
}

type tickMsg struct{}

func (m *Model) fetch() tea.Msg {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := m.src.Fetch(ctx)
	return frameMsg{f, err}
}

func (m *Model) request(req exec.Request) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return requestMsg{req, m.src.Request(ctx, req)}
	}
}

// Init implements tea.Model.
func (m *Model) Init() tea.Cmd { return m.fetch }

// Update implements tea.Model.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case frameMsg:
		var final finalError
		if errors.As(msg.err, &final) {
			m.err = final.err
			return m, tea.Quit
		}
		if msg.err != nil {
			m.status = "cannot read the plan: " + msg.err.Error()
		} else {
			m.events = append(m.events, exec.Delta(m.frame.Record, msg.f.Record)...)
			if len(m.events) > 200 {
				m.events = m.events[len(m.events)-200:]
			}
			m.frame = msg.f
			if m.started.IsZero() && msg.f.Record != nil {
				m.started = msg.f.Record.SubmittedAt
			}
			if msg.f.Record != nil && msg.f.Record.State.Terminal() {
				return m, tea.Quit
			}
		}
		return m, tea.Tick(m.every, func(time.Time) tea.Msg { return tickMsg{} })
	case tickMsg:
		return m, m.fetch
	case requestMsg:
		if msg.err != nil {
			m.status = fmt.Sprintf("%s refused: %v", msg.req, msg.err)
		} else {
			m.status = fmt.Sprintf("%s requested", msg.req)
		}
	case tea.KeyPressMsg:
		return m.key(msg.String())
	}
	return m, nil
}

func (m *Model) key(k string) (tea.Model, tea.Cmd) {
	if m.confirm {
		m.confirm = false
		if k == "y" {
			return m, m.request(exec.RequestCancel)
		}
		m.status = "not cancelled"
		return m, nil
	}
	switch k {
	case "q", "ctrl+c":
		m.detached = true
		return m, tea.Quit
	case "p":
		if m.frame.Record != nil && m.frame.Record.State == exec.Paused {
			return m, m.request(exec.RequestResume)
		}
		return m, m.request(exec.RequestPause)
	case "c":
		m.confirm = true
	}
	return m, nil
}

// View implements tea.Model.
func (m *Model) View() tea.View { return tea.NewView(m.Render()) }

// Render is the screen as text.
func (m *Model) Render() string {
	r := m.frame.Record
	if r == nil {
		return "reading the plan…\n"
	}
	var b strings.Builder
	elapsed := m.now().Sub(m.started)
	if r.FinishedAt != nil {
		elapsed = r.FinishedAt.Sub(m.started)
	}
	fmt.Fprintf(&b, "Plan %s · %s · %s · elapsed %s · ETA %s\n", r.ID, strings.TrimSpace(string(r.Plan.Kind)+" "+string(r.Plan.Target)), strings.ToUpper(string(r.State)),
		elapsed.Round(time.Second), m.eta(r, elapsed))
	if f := r.Failing; f != nil && !r.State.Terminal() {
		// Why nothing begins, and what it waits for.
		fmt.Fprintf(&b, "FAILING since %s, once its running steps end: %s\n", f.Since.UTC().Format("15:04:05"), f.Message)
	}
	if h := r.Held; h != nil && !r.State.Terminal() {
		// Why nothing begins: the lag budget, and when it lets go.
		fmt.Fprintf(&b, "HELD by the lag budget since %s: changefeed %s lags %s, over %s; goes on below %s\n",
			h.Since.UTC().Format("15:04:05"), h.Changefeed, h.Lag.Round(time.Millisecond), r.Budget.MaxLag, r.Budget.Resume())
	}
	b.WriteString("\n")

	// Both bars count the steps' states, as the step list below shows
	// them: a bar never says moved while its step says pending.
	mDone, mAll := stepsDone(r, plan.StepMoveMaintainer)
	pDone, pAll := partitionsMoved(r)
	fmt.Fprintf(&b, "maintainers %s\n", moved(mDone, mAll, 30))
	fmt.Fprintf(&b, "partitions  %s\n\n", moved(pDone, pAll, 30))

	fmt.Fprintf(&b, "%-12s %-10s %11s %10s %6s\n", "CAPTURE", "LIVENESS", "MAINTAINERS", "PARTITIONS", "MOVES")
	for _, n := range m.frame.Nodes {
		fmt.Fprintf(&b, "%-12s %-10s %11d %10d %6d\n", n.Node, n.Liveness, n.Maintainers, n.Partitions, n.Moves)
	}

	b.WriteString("\nSteps:\n")
	for _, line := range stepLines(r, 10) {
		b.WriteString("  " + line + "\n")
	}

	b.WriteString("\nEvents:\n")
	var notable []exec.Event
	for _, ev := range m.events {
		if ev.Type != exec.EventStep {
			notable = append(notable, ev)
		}
	}
	if len(notable) > 6 {
		notable = notable[len(notable)-6:]
	}
	for _, ev := range notable {
		fmt.Fprintf(&b, "  %s %-9s %s\n", ev.Time.UTC().Format("15:04:05"), ev.Type, truncate(ev.Message, m.width-22))
	}
	b.WriteString("\n")
	switch {
	case m.confirm:
		fmt.Fprintf(&b, "Cancel plan %s? What is not done is cancelled. [y/N]\n", r.ID)
	case r.State.Terminal():
		fmt.Fprintf(&b, "%s: %s\n", r.State, r.Message)
	default:
		pause := "pause"
		if r.State == exec.Paused {
			pause = "resume"
		}
		fmt.Fprintf(&b, "q detach (the plan goes on) · p %s · c cancel", pause)
		if m.status != "" {
			fmt.Fprintf(&b, " · %s", m.status)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// eta: from the pace so far once a step is done, else what is left of the
// plan's prediction. Time paused does not count, so the ETA stands still
// while the plan is paused.
func (m *Model) eta(r *exec.Record, elapsed time.Duration) string {
	if r.State.Terminal() {
		return "-"
	}
	working := elapsed - r.PausedFor(m.now())
	c := r.Counts()
	// The pace counts the steps a running plan is through: a skipped
	// one (its changefeed removed) needs nothing more either.
	done, total := c[exec.StepDone]+c[exec.StepSkipped], len(r.Steps)
	var left time.Duration
	if done == 0 || working <= 0 {
		left = max(0, time.Duration(r.Plan.PredictedMillis)*time.Millisecond-max(working, 0))
	} else {
		left = time.Duration(float64(working) * float64(total-done) / float64(done))
	}
	s := left.Round(time.Second).String()
	if r.State == exec.Paused {
		s += " once resumed"
	}
	return s
}

// partitionsMoved counts the partitions of the plan's partition steps
// that are done, and of all of them: a skipped or cancelled step moved
// nothing (an abandoned drain's bars used to read full).
func partitionsMoved(r *exec.Record) (done, all int) {
	for _, s := range r.Steps {
		n := 0
		switch st := r.Step(s); st.Kind {
		case plan.StepMovePartition:
			n = 1
		case plan.StepMovePartitions:
			n = st.Count
		}
		all += n
		if s.State == exec.StepDone {
			done += n
		}
	}
	return done, all
}

func stepsDone(r *exec.Record, kind plan.StepKind) (done, all int) {
	for _, s := range r.Steps {
		if r.Step(s).Kind == kind {
			all++
			if s.State == exec.StepDone {
				done++
			}
		}
	}
	return done, all
}

// moved is a bar and its count: "[====......] 2/5 moved". With nothing
// of its kind in the plan (a split moves neither maintainers nor
// partitions) the bar is blank and says so: drawn full over "0/0 moved"
// it read as work done.
func moved(done, all, width int) string {
	if all == 0 {
		return "[" + strings.Repeat(" ", width) + "] nothing to move"
	}
	n := done * width / all
	return fmt.Sprintf("[%s%s] %d/%d moved", strings.Repeat("=", n), strings.Repeat(".", width-n), done, all)
}

// stepLines shows the steps around the current batch, at most n lines.
func stepLines(r *exec.Record, n int) []string {
	cur := r.CurrentBatch()
	first := 0
	for i, s := range r.Steps {
		if s.Batch >= cur-1 {
			first = i
			break
		}
	}
	if cur >= len(r.Plan.Batches) {
		first = max(0, len(r.Steps)-n)
	}
	var out []string
	for i := first; i < len(r.Steps) && len(out) < n; i++ {
		s := r.Steps[i]
		out = append(out, fmt.Sprintf("%3d. %-9s %s", s.Batch+1, s.State, plan.StepText(r.Step(s))))
	}
	if more := len(r.Steps) - first - len(out); more > 0 {
		out = append(out, fmt.Sprintf("     … %d more", more))
	}
	return out
}

func truncate(s string, n int) string {
	if n < 10 || len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
