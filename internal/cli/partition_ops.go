package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// planFlags are the flags every plan-making command shares with drain.
type planFlags struct {
	dryRun  bool
	yes     bool
	watch   bool
	paused  bool
	timeout time.Duration
	planOut string
	// The lag budget (exec.Budget).
	maxLag, resumeBelow, holdTimeout time.Duration
	// checks is --checks: strict, enabled or skip.
	checks string
	// fromSnapshot plans from a `cluster snapshot` file, asking no
	// cluster (with --dry-run).
	fromSnapshot string
	// hook is a rollout upgrade's (--exec); nil for every other plan.
	hook *rolloutHook
}

// checkMode is --checks, a usage error when it is none of its values.
func (f *planFlags) checkMode() (plan.CheckMode, error) {
	if f.checks == "" {
		return plan.ChecksEnabled, nil
	}
	m, err := plan.ParseCheckMode(f.checks)
	if err != nil {
		return "", usageErr(err)
	}
	return m, nil
}

// budget is the plan's lag budget from the flags, checked here so that a
// bad one is a usage error before anything is submitted; nil is none.
func (f *planFlags) budget() (*api.LagBudget, error) {
	b := exec.Budget{MaxLag: f.maxLag, ResumeBelow: f.resumeBelow, HoldTimeout: f.holdTimeout}
	if err := b.Check(); err != nil {
		return nil, usageErr(err)
	}
	return api.LagBudgetOf(b), nil
}

func (f *planFlags) register(cmd *cobra.Command, timeout time.Duration) {
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "show the plan and exit: 2 if anything would change, 0 if not")
	fl.BoolVar(&f.yes, "yes", false, "approve without asking (scripts)")
	f.registerSubmit(cmd, timeout)
	fl.StringVar(&f.planOut, "plan-out", "", "also write the plan as JSON to this file (apply it later with 'cdcctl plan apply')")
	fl.StringVar(&f.fromSnapshot, "from-snapshot", "", "with --dry-run: plan from this 'cdcctl cluster snapshot' file, asking no cluster")
}

// registerSubmit: the flags of submitting a plan, which plan apply
// shares.
func (f *planFlags) registerSubmit(cmd *cobra.Command, timeout time.Duration) {
	fl := cmd.Flags()
	fl.BoolVar(&f.watch, "watch", false, "follow the plan to its end")
	fl.BoolVar(&f.paused, "paused", false, "submit the plan paused: its steps wait for 'cdcctl plan resume ID' (a drain's capture turns Draining at once)")
	fl.DurationVar(&f.timeout, "timeout", timeout, "with --watch: give up waiting after this long (exit 3; the plan goes on)")
	fl.DurationVar(&f.maxLag, "max-lag", 0, "lag budget: while a changefeed the plan acts on lags more than this, no step begins (running ones finish); 0: no budget")
	fl.DurationVar(&f.resumeBelow, "resume-below", 0, "with --max-lag: a held plan goes on once the lag is below this (default: half of --max-lag)")
	fl.DurationVar(&f.holdTimeout, "hold-timeout", 0, "with --max-lag: a plan held longer than this fails (exit 9); 0: it waits as long as it takes")
	fl.StringVar(&f.checks, "checks", string(plan.ChecksEnabled), "pre-checks before submitting: enabled (blockers refuse, exit 10), strict (warnings refuse too) or skip")
	_ = cmd.RegisterFlagCompletionFunc("checks", cobra.FixedCompletions([]string{
		"enabled\tblockers refuse the plan, warnings are shown",
		"strict\twarnings refuse the plan too",
		"skip\tsubmit without pre-checks",
	}, cobra.ShellCompDirectiveNoFileComp))
}

// planSubmit submits an approved plan: applyPlan, or a drain's own path.
type planSubmit func(ctx context.Context, o *options, c *api.Client, snap *model.Snapshot, p *plan.Plan, f *planFlags) error

// runPlan computes a plan from the cluster's snapshot, then shows it
// (--dry-run), saves it (--plan-out), or submits it after approval.
func runPlan(ctx context.Context, o *options, f *planFlags, compute func(*model.Snapshot) (*plan.Plan, error), submit planSubmit) error {
	if _, err := f.budget(); err != nil {
		return err
	}
	mode, err := f.checkMode()
	if err != nil {
		return err
	}
	var (
		c    *api.Client
		snap *model.Snapshot
		data checkSource
	)
	if f.fromSnapshot != "" {
		if !f.dryRun {
			return usageErr(fmt.Errorf("--from-snapshot plans offline: add --dry-run (and --plan-out FILE to submit it later with 'cdcctl plan apply', which refuses it if the cluster changed)"))
		}
		file, err := readSnapshotFile(f.fromSnapshot)
		if err != nil {
			return err
		}
		snap = &file.Snapshot
		data = func(context.Context, []model.ChangefeedID) (*checkData, error) { return &file.checkData, nil }
	} else {
		if c, err = o.client(); err != nil {
			return err
		}
		live, err := c.Snapshot(ctx)
		if err != nil {
			return err
		}
		snap, data = &live.Snapshot, liveChecks(c)
	}
	p, err := compute(snap)
	if err != nil {
		return err
	}
	if f.planOut != "" {
		b, _ := json.MarshalIndent(p, "", "  ")
		if err := os.WriteFile(f.planOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if len(p.Batches) == 0 {
		return o.render(p, func(tw tableWriter) { fmt.Fprintf(tw, "Nothing to do: %s %s changes nothing.\n", p.Kind, p.Target) })
	}
	if f.dryRun {
		if c != nil {
			// As the coordinator refuses it at submission: a dry run
			// said yes where the request was refused.
			if err := busyInPlans(ctx, c, p); err != nil {
				return err
			}
		}
		fs, err := preCheck(ctx, data, snap, p, f)
		if err != nil {
			return err
		}
		shown := checkedPlan{Plan: p, Checks: append([]plan.Finding{}, fs...), ChecksMode: mode}
		if err := o.render(shown, func(tw tableWriter) {
			_ = plan.Render(tw, snap, p)
			fmt.Fprintln(tw)
			plan.RenderFindings(tw, mode, fs)
		}); err != nil {
			return err
		}
		return errDryRunChanges
	}
	if err := gate(ctx, o, c, snap, p, f); err != nil {
		return err
	}
	return submit(ctx, o, c, snap, p, f)
}

// busyInPlans refuses a partition plan whose partitions another plan not
// over still has to move or split (a paused one, say), as the
// coordinator does when it is submitted: exit 7, naming the plan.
func busyInPlans(ctx context.Context, c *api.Client, p *plan.Plan) error {
	mine := map[string]bool{}
	for _, b := range p.Batches {
		for _, st := range b.Steps {
			mine[st.Partition] = true
		}
	}
	list, err := c.Plans(ctx)
	if err != nil {
		return err
	}
	for _, sum := range list.Plans {
		if sum.State.Terminal() || sum.Steps[exec.StepPending]+sum.Steps[exec.StepRunning] == 0 {
			continue
		}
		other, err := c.Plan(ctx, sum.ID)
		if api.IsCode(err, api.CodeNotFound) {
			// It finished and was removed since the list: it holds
			// nothing any more.
			continue
		}
		if err != nil {
			return err
		}
		rec := other.Record()
		if st, held := rec.Holds(mine); held {
			return withExit(ExitBusy, fmt.Errorf("partition %s is busy: %s; let it finish, resume it ('cdcctl plan resume %s') or cancel it", st.Partition, rec.BusyMessage(st), rec.ID))
		}
	}
	return nil
}

func newPartitionGetCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:               "get PARTITION",
		Short:             "Show a partition: key range, capture, status, and its recent history (splits, moves)",
		Args:              exactArgs(1, "the partition"),
		ValidArgsFunction: firstArg(completePartitions(o)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			p, err := c.Partition(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.render(p, func(tw tableWriter) {
				end := p.End
				if end == "" {
					end = "∞"
				}
				fmt.Fprintf(tw, "Partition:\t%s\n", p.ID)
				fmt.Fprintf(tw, "Changefeed:\t%s\n", p.Changefeed)
				fmt.Fprintf(tw, "Range:\t%s [%q, %s)\n", p.Table, p.Start, end)
				fmt.Fprintf(tw, "Capture:\t%s\n", orNone(p.Node))
				status := p.Status
				switch {
				case p.SplitKey != "":
					status += fmt.Sprintf(" (being split at %q)", p.SplitKey)
				case p.Target != "":
					status += " (moving to " + p.Target + ")"
				}
				if p.BusySince != nil {
					status += fmt.Sprintf(" for %s", time.Since(*p.BusySince).Round(100*time.Millisecond))
				}
				fmt.Fprintf(tw, "Status:\t%s\n", status)
				fmt.Fprintf(tw, "Epoch:\t%d\n", p.Epoch)
				if p.Pinned {
					fmt.Fprintf(tw, "Pinned:\tyes (placed by an operator; the balance scheduler leaves it)\n")
				}
				// As changefeed get shows its own: the position, then its
				// time (model.Ts's own form is a debugging one).
				fmt.Fprintf(tw, "Checkpoint:\t%d (%s)\n", p.CheckpointTs, model.Ts(p.CheckpointTs).Time().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
				if p.Snapshot != "" {
					fmt.Fprintf(tw, "Snapshot:\t%s\n", p.Snapshot)
				}
				fmt.Fprintf(tw, "History:\t%s\n", historyText(p.History))
			})
		},
	}
}

func historyText(h []model.PartitionEvent) string {
	if len(h) == 0 {
		return "none"
	}
	var lines []string
	for _, ev := range h {
		l := fmt.Sprintf("%s  %s %s → %s", ev.Time.Format(time.RFC3339), ev.Kind, ev.From, ev.To)
		if ev.Detail != "" {
			l += " " + ev.Detail
		}
		if ev.Graceful {
			l += " (graceful)"
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n\t")
}

// completePartitions completes partition ids from the cluster.
func completePartitions(o *options) cobra.CompletionFunc {
	return completeFrom(o, func(ctx context.Context, c *api.Client) ([]string, error) {
		list, err := c.Partitions(ctx, "", "")
		if err != nil {
			return nil, err
		}
		var out []string
		for _, p := range list.Partitions {
			out = append(out, fmt.Sprintf("%s\t%s %s [%q,%q) on %s", p.ID, p.Changefeed, p.Table, p.Start, p.End, orNone(p.Node)))
		}
		return out, nil
	})
}
