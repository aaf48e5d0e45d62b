package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// watchPlan follows a plan to its end and prints its events: timestamped
// lines, or NDJSON with -o json (one exec.Event per line, the last one
// done, failed or cancelled). Exit: 0 done, 1 failed, 4 cancelled, 3 when
// timeout passes first (the plan goes on).
func watchPlan(ctx context.Context, o *options, c *api.Client, id string, timeout time.Duration, hook *rolloutHook) (*exec.Record, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var prev *exec.Record
	var stream exec.Stream
	for {
		cur, err := c.Plan(wctx, id)
		if err == nil {
			for _, ev := range stream.Next(cur.Record()) {
				printEvent(o.out, o.output(), ev)
			}
			rec := *cur.Record()
			prev = &rec
			if rec.State.Terminal() {
				return prev, planOutcome(prev)
			}
			if hook != nil {
				if err := hook.follow(wctx, o, c, prev); err != nil {
					return prev, err
				}
			}
		} else if !transient(err) {
			// A missing plan, a refused token or a bad request does not
			// get better by waiting: say so now, not at --timeout.
			return prev, err
		}
		select {
		case <-wctx.Done():
			return prev, withExit(ExitTimeout, fmt.Errorf("--timeout %s reached while plan %s is still running; it goes on ('cdcctl plan watch %s')", timeout, id, id))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// transient tells the errors a watch rides out: agents unreachable or
// between coordinators, and answers that did not come (other errors are
// the API's refusals, which it returns).
func transient(err error) bool {
	var e *api.Error
	if !errors.As(err, &e) {
		return true // no answer: the client already tried every server
	}
	switch e.Code {
	case api.CodeUnavailable, api.CodeNoCoordinator, api.CodeNotCoordinator, api.CodeInternal:
		return true
	}
	return false
}

// planOutcome is a finished plan's exit: 0 done, 1 failed, 4 cancelled,
// 9 failed held by its lag budget past --hold-timeout.
func planOutcome(rec *exec.Record) error {
	switch rec.State {
	case exec.Failed:
		if strings.HasPrefix(rec.Message, exec.HoldTimeoutPrefix) {
			return withExit(ExitHeld, fmt.Errorf("plan %s failed: %s", rec.ID, rec.Message))
		}
		return withExit(ExitError, fmt.Errorf("plan %s failed: %s", rec.ID, rec.Message))
	case exec.Cancelled:
		return withExit(ExitCancelled, fmt.Errorf("plan %s was cancelled: %s", rec.ID, rec.Message))
	}
	return nil
}

// notDoneText is ", N skipped, M cancelled" beside a count of steps
// done, leaving out what is none: a step skipped (what it acts on was
// removed, or the plan ended before it) or cancelled is not done, and
// says so.
func notDoneText(skipped, cancelled int) string {
	s := ""
	if skipped > 0 {
		s += fmt.Sprintf(", %d skipped", skipped)
	}
	if cancelled > 0 {
		s += fmt.Sprintf(", %d cancelled", cancelled)
	}
	return s
}

// printEvent renders one event for a person, or as one NDJSON line.
func printEvent(w io.Writer, format string, ev exec.Event) {
	if format == formatJSON {
		b, _ := json.Marshal(ev)
		fmt.Fprintln(w, string(b))
		return
	}
	if tmpl, ok := strings.CutPrefix(format, formatJSONPath); ok {
		_ = writeJSONPath(w, tmpl, ev) // the template was checked before the watch
		return
	}
	if format == formatYAML {
		// One YAML document per event, as kubectl's watches print.
		fmt.Fprintln(w, "---")
		_ = writeYAML(w, ev)
		return
	}
	at := ev.Time.Local().Format("15:04:05")
	progress := ""
	if p := ev.Progress; p != nil {
		progress = fmt.Sprintf(" [%d/%d done%s, %d running]", p.Done, p.Total, notDoneText(p.Skipped, p.Cancelled), p.Running)
	}
	if ev.Type == exec.EventStep && ev.Step != nil {
		note := ""
		if ev.Message != "" {
			note = " (" + ev.Message + ")"
		}
		fmt.Fprintf(w, "%s batch %d: %s: %s%s%s\n", at, ev.Batch+1, plan.StepText(*ev.Step), ev.State, note, progress)
		return
	}
	fmt.Fprintf(w, "%s %s: %s%s\n", at, ev.Type, ev.Message, progress)
}

func newPlanListCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the cluster's plans, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			l, err := c.Plans(cmd.Context())
			if err != nil {
				return err
			}
			return o.render(l, func(tw tableWriter) {
				if tw.wide {
					tw.header("ID\tKIND\tTARGET\tSTATE\tSTEPS DONE\tSUBMITTED\tBY\tFAILED\tMESSAGE")
				} else {
					tw.header("ID\tKIND\tTARGET\tSTATE\tSTEPS DONE\tSUBMITTED\tBY")
				}
				for _, p := range l.Plans {
					total := 0
					for _, n := range p.Steps {
						total += n
					}
					// Done only: skipped and cancelled steps were not.
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s", p.ID, p.Kind, orDash(p.Target), p.State,
						p.Steps[exec.StepDone], total, p.SubmittedAt, p.SubmittedBy)
					if tw.wide {
						fmt.Fprintf(tw, "\t%d\t%s", p.Steps[exec.StepFailed], orDash(p.Message))
					}
					fmt.Fprintln(tw)
				}
			})
		},
	}
}

func newPlanWatchCommand(o *options) *cobra.Command {
	var (
		timeout time.Duration
		hf      hookFlags
	)
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a plan to its end (lines, or NDJSON with -o json)",
		Long: `Follow a plan to its end: timestamped lines, NDJSON with -o json, or the
live view on a terminal. With --exec, follow a rollout upgrade whose
cdcctl is gone: run the hook for the capture it waits to see restarted
(and each after it), as 'rollout upgrade --exec' would have.`,
		Args: exactArgs(1, "the plan id ('cdcctl plan list')"),
		RunE: func(cmd *cobra.Command, args []string) error {
			hook, err := hf.hook()
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			_, err = followPlan(cmd.Context(), o, c, args[0], timeout, hook)
			return err
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "give up waiting after this long (exit 3; the plan goes on)")
	hf.register(cmd, "run this command for each capture a rollout upgrade waits to see restarted (as 'rollout upgrade --exec')")
	return cmd
}

func newPlanRequestCommand(o *options, req exec.Request, short string) *cobra.Command {
	return &cobra.Command{
		Use:   string(req) + " ID",
		Short: short,
		Args:  exactArgs(1, "the plan id ('cdcctl plan list')"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			p, err := c.RequestPlan(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return o.render(p, func(tw tableWriter) {
				fmt.Fprintf(tw, "Asked plan %s (%s) to %s; follow it with 'cdcctl plan watch %s'.\n", p.ID, p.State, req, p.ID)
			})
		},
	}
}

// renderRecord shows a plan's execution: its state, then every batch and
// the state of each step.
func renderRecord(w io.Writer, p *api.PlanResponse) {
	rec := p.Record()
	c := rec.Counts()
	what := string(p.Plan.Kind)
	if p.Plan.Target != "" {
		what += " " + string(p.Plan.Target)
	}
	fmt.Fprintf(w, "Plan %s: %s, %s", p.ID, what, p.State)
	if p.Request != "" && !p.State.Terminal() {
		fmt.Fprintf(w, " (%s requested)", p.Request)
	}
	fmt.Fprintf(w, "\n  submitted %s by %s; %d/%d steps done%s, %d running\n", p.SubmittedAt.Local().Format(time.RFC3339), p.SubmittedBy,
		c[exec.StepDone], len(p.Steps), notDoneText(c[exec.StepSkipped], c[exec.StepCancelled]), c[exec.StepRunning])
	if p.Message != "" {
		fmt.Fprintf(w, "  %s\n", p.Message)
	}
	if b := p.Budget; b != nil {
		fmt.Fprintf(w, "  lag budget: max %s, going on below %s", b.MaxLag, b.ResumeBelow)
		if b.HoldTimeout != "" {
			fmt.Fprintf(w, ", failing when held over %s", b.HoldTimeout)
		}
		if p.Width > 0 {
			fmt.Fprintf(w, "; at most %d steps at once", p.Width)
		}
		fmt.Fprintln(w)
	}
	if f := p.Failing; f != nil && !p.State.Terminal() {
		fmt.Fprintf(w, "  FAILING since %s, once its running steps end: %s\n", f.Since.Local().Format("15:04:05"), f.Message)
	}
	if h := p.Held; h != nil && !p.State.Terminal() {
		fmt.Fprintf(w, "  HELD since %s: changefeed %s lags %s\n", h.Since.Local().Format("15:04:05"), h.Changefeed, h.Lag)
	}
	fmt.Fprintln(w, "\nSteps:")
	for _, s := range p.Steps {
		line := plan.StepText(rec.Step(s))
		if s.Note != "" && (s.State == exec.StepSkipped || s.State == exec.StepFailed) {
			// Why it was skipped or failed: plan watch said it as it
			// happened; a later show says it too, on the step's line.
			line += " (" + strings.Join(strings.Fields(s.Note), " ") + ")"
		}
		fmt.Fprintf(w, "  %2d.%-2d %-9s %s\n", s.Batch+1, s.Index+1, s.State, line)
	}
	if len(p.Log) > 0 {
		fmt.Fprintln(w, "\nEvents:")
		for _, ev := range p.Log {
			fmt.Fprintf(w, "  %s %s: %s\n", ev.Time.Local().Format("15:04:05"), ev.Type, ev.Message)
		}
	}
}
