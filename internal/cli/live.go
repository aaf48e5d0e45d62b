package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/tui"
)

// liveSource feeds the terminal view from the API.
type liveSource struct {
	c  *api.Client
	id string
}

func (s liveSource) Fetch(ctx context.Context) (tui.Frame, error) {
	p, err := s.c.Plan(ctx, s.id)
	if err != nil {
		return tui.Frame{}, finalUnlessTransient(err)
	}
	snap, err := s.c.Snapshot(ctx)
	if err != nil {
		return tui.Frame{}, finalUnlessTransient(err)
	}
	rec := *p.Record()
	moves := map[string]int{}
	for _, st := range rec.Steps {
		if st.State != exec.StepRunning {
			continue
		}
		step := rec.Step(st)
		switch step.Kind {
		case plan.StepMoveMaintainer, plan.StepMovePartition:
			moves[string(step.From)]++
			moves[string(step.To)]++
		case plan.StepMovePartitions:
			moves[string(step.From)]++
			for n := range step.Spread {
				moves[string(n)]++
			}
		}
	}
	// The per-capture counts as they are now: the "before" of an empty plan.
	var rows []tui.NodeRow
	for _, d := range plan.Diff(&snap.Snapshot, &plan.Plan{}) {
		rows = append(rows, tui.NodeRow{Node: string(d.Node), Liveness: d.LivenessBefore, Maintainers: d.MaintainersBefore,
			Partitions: d.PartitionsBefore, Moves: moves[string(d.Node)]})
	}
	return tui.Frame{Record: &rec, Nodes: rows}, nil
}

func (s liveSource) Request(ctx context.Context, req exec.Request) error {
	_, err := s.c.RequestPlan(ctx, s.id, req)
	return err
}

// finalUnlessTransient marks an answer that waiting will not change (no
// such plan, a token refused) as the end of the live view, which then
// exits with that answer's code, as watchPlan does.
func finalUnlessTransient(err error) error {
	if transient(err) {
		return err
	}
	return tui.Final(err)
}

// sized says a terminal reports its size: one of 0 columns (a pty no one
// set, as script(1) gives) showed nothing of the live view, not even the
// plan's end.
func sized(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	cols, rows, err := term.GetSize(f.Fd())
	return err == nil && cols > 0 && rows > 0
}

// followPlan follows a plan: the live view on a terminal (table output),
// timestamped lines or NDJSON elsewhere (and with a rollout's hook). Exit codes as watchPlan's; q in
// the live view detaches with 0 and leaves the plan running.
func followPlan(ctx context.Context, o *options, c *api.Client, id string, timeout time.Duration, hook *rolloutHook) (*exec.Record, error) {
	// A hook's output goes between the lines: no live view with one.
	if hook != nil || o.output() != formatTable && o.output() != formatWide || !isTerminal(o.out) || !isTerminal(o.in) || !sized(o.out) {
		return watchPlan(ctx, o, c, id, timeout, hook)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := tui.New(liveSource{c: c, id: id}, time.Now, 250*time.Millisecond)
	_, err := tea.NewProgram(m, tea.WithContext(wctx), tea.WithInput(o.in), tea.WithOutput(o.out)).Run()
	rec := m.Record()
	switch {
	case m.Err() != nil:
		return rec, m.Err()
	case m.Detached():
		fmt.Fprintf(o.out, "Detached; plan %s goes on ('cdcctl plan watch %s').\n", id, id)
		return rec, nil
	case errors.Is(err, tea.ErrProgramKilled) || wctx.Err() != nil:
		return rec, withExit(ExitTimeout, fmt.Errorf("--timeout %s reached while plan %s is still running; it goes on ('cdcctl plan watch %s')", timeout, id, id))
	case err != nil:
		return rec, err
	case rec == nil:
		return nil, fmt.Errorf("plan %s: nothing was read", id)
	}
	// The program left its last frame, the plan's end, on the screen.
	return rec, planOutcome(rec)
}
