package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

func newPlanCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show, apply, follow, pause, resume and cancel plans",
		Long: `Every drain runs as a plan: batches of steps, executed by the coordinator, with
their states stored in etcd (a new coordinator goes on where the old one was).

A plan saved with --plan-out carries the fingerprint of what it read. 'plan
show FILE' renders it and says whether it still holds; 'plan apply FILE'
submits it, and the cluster refuses it (exit 5, naming what changed) if
anything it read has changed since. Writes to anything else (checkpoints,
progress) leave it valid.

'plan show ID' shows a submitted plan's execution; 'plan watch ID' follows
it; pause lets running steps finish and begins no new one; cancel ends
it, and what is not done is cancelled.`,
	}
	cmd.AddCommand(newPlanShowCommand(o), newPlanApplyCommand(o), newPlanDiffCommand(o), newPlanListCommand(o), newPlanWatchCommand(o),
		newPlanRequestCommand(o, exec.RequestPause, "Pause a plan: running steps finish, no new step begins"),
		newPlanRequestCommand(o, exec.RequestResume, "Resume a paused plan"),
		newPlanRequestCommand(o, exec.RequestCancel, "Cancel a plan: what is not done is cancelled (a drained capture stays Draining)"),
		newPlanSetCommand(o))
	return cmd
}

func readPlanFile(path string) (*plan.Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErr(fmt.Errorf("read the plan: %w", err))
	}
	var p plan.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, usageErr(fmt.Errorf("%s is not a plan (JSON from --plan-out): %v", path, err))
	}
	if p.Kind == snapshotKind {
		return nil, usageErr(fmt.Errorf("%s is a cluster snapshot, not a plan: compare a plan with it (cdcctl plan diff PLAN %s), or plan from it (--from-snapshot %s --dry-run --plan-out FILE)", path, path, path))
	}
	if p.Version != 1 || p.Kind == "" || len(p.Fingerprint.Objects) == 0 {
		return nil, usageErr(fmt.Errorf("%s is not a plan from --plan-out: version %d, kind %q, %d fingerprinted objects", path, p.Version, p.Kind, len(p.Fingerprint.Objects)))
	}
	if err := p.Validate(); err != nil {
		return nil, usageErr(fmt.Errorf("%s: %w", path, err))
	}
	return &p, nil
}

// planShow is `plan show -o json`: the plan and whether it still holds.
type planShow struct {
	Version int           `json:"version"`
	Plan    *plan.Plan    `json:"plan"`
	Stale   bool          `json:"stale"`
	Changed []plan.Change `json:"changed,omitempty"`
}

func newPlanShowCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID|FILE",
		Short: "Show a submitted plan's execution, or render a saved plan and check it against the cluster (exit 5 if stale)",
		Args:  exactArgs(1, "a plan id ('cdcctl plan list') or a file from --plan-out"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if _, serr := os.Stat(args[0]); serr != nil {
				if looksLikeFile(args[0]) {
					// A plan id has no '/' and no extension: the
					// agent would only say it has no such endpoint.
					return usageErr(fmt.Errorf("read the plan: %w (a file from --plan-out; a submitted plan is shown by its id: cdcctl plan list)", serr))
				}
				rec, err := c.Plan(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return o.render(rec, func(tw tableWriter) { renderRecord(tw, rec) })
			}
			p, err := readPlanFile(args[0])
			if err != nil {
				return err
			}
			snap, err := c.Snapshot(cmd.Context())
			if err != nil {
				return err
			}
			changes := plan.Check(p, &snap.Snapshot)
			err = o.render(planShow{Version: api.SchemaVersion, Plan: p, Stale: len(changes) > 0, Changed: changes}, func(tw tableWriter) {
				base := &snap.Snapshot
				if len(changes) > 0 {
					base = nil // its counts now are not what it moves
				}
				_ = plan.Render(tw, base, p)
				if len(changes) == 0 {
					fmt.Fprintln(tw, "\nThe plan still holds: nothing it read has changed.")
					return
				}
				fmt.Fprintf(tw, "\nThe plan is stale: %d object(s) it read changed:\n", len(changes))
				for _, ch := range changes {
					fmt.Fprintf(tw, "  %s\n", ch)
				}
			})
			if err == nil && len(changes) > 0 {
				return withExit(ExitStalePlan, fmt.Errorf("the plan in %s is stale; compute it again", args[0]))
			}
			return err
		},
	}
}

// applyPlan submits a plan of any kind exactly as computed (POST
// /api/v2/plans), after approval, and follows it with --watch.
func applyPlan(ctx context.Context, o *options, c *api.Client, snap *model.Snapshot, p *plan.Plan, f *planFlags) error {
	if f.hook != nil && p.RestartBy != plan.RestartByHook {
		return usageErr(fmt.Errorf("--exec is a rollout upgrade's hook; this %s plan runs none: apply it without --exec", p.KindText()))
	}
	what := fmt.Sprintf("Apply the %s plan of %s", p.Kind, p.Target)
	if p.Kind == plan.KindRollout {
		what = fmt.Sprintf("Restart %d captures one at a time", len(p.RolloutCaptures()))
		if p.RestartBy == plan.RestartByHook {
			if f.hook == nil {
				return usageErr(fmt.Errorf("this rollout upgrade's captures are restarted by a hook: give it with --exec 'CMD' (as 'cdcctl rollout upgrade --exec')"))
			}
			what = fmt.Sprintf("Upgrade %d captures one at a time (the hook restarts each: %s)", len(p.RolloutCaptures()), f.hook.command)
		}
	}
	if err := approve(o, snap, p, what, f.yes); err != nil {
		return err
	}
	budget, err := f.budget()
	if err != nil {
		return err
	}
	res, err := c.SubmitPlan(ctx, api.SubmitPlanRequest{Plan: p, SubmittedBy: submitter(), Paused: f.paused, Budget: budget})
	if err != nil {
		return err
	}
	if !f.watch {
		return o.render(res, func(tw tableWriter) {
			if p.Kind == plan.KindRollout {
				fmt.Fprintf(tw, "Plan %s submitted: rollout %s of %s, %d steps.\n", res.ID, p.RolloutVerb(), captureList(p.RolloutCaptures()), len(res.Steps))
			} else {
				fmt.Fprintf(tw, "Plan %s submitted: %s of %s, %d steps.\n", res.ID, p.Kind, p.Target, len(res.Steps))
			}
			fmt.Fprintf(tw, "Follow it with: cdcctl plan watch %s\n", res.ID)
		})
	}
	rec, err := followPlan(ctx, o, c, res.ID, f.timeout, f.hook)
	if err != nil {
		return err
	}
	if p.Kind == plan.KindDrain {
		printDrainEnd(ctx, o, c, rec, p.Target)
	}
	return nil
}

func newPlanApplyCommand(o *options) *cobra.Command {
	var (
		f  planFlags
		hf hookFlags
	)
	cmd := &cobra.Command{
		Use:   "apply FILE",
		Short: "Submit a saved plan exactly as computed (refused with exit 5 if stale)",
		Example: `  cdcctl drain capture-3 --batch 2 --dry-run --plan-out drain.json
  cdcctl plan apply drain.json --yes --watch`,
		Args: exactArgs(1, "the plan file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := readPlanFile(args[0])
			if err != nil {
				return err
			}
			if f.hook, err = hf.hook(); err != nil {
				return err
			}
			if f.hook != nil {
				f.watch = true // the hook runs while the plan is followed
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			snap, err := c.Snapshot(cmd.Context())
			if err != nil {
				return err
			}
			if err := gate(cmd.Context(), o, c, &snap.Snapshot, p, &f); err != nil {
				return err
			}
			return applyPlan(cmd.Context(), o, c, &snap.Snapshot, p, &f)
		},
	}
	cmd.Flags().BoolVar(&f.yes, "yes", false, "approve without asking (scripts)")
	f.registerSubmit(cmd, 30*time.Minute)
	hf.register(cmd, "a saved rollout upgrade's hook: the command that restarts one capture (implies --watch)")
	return cmd
}

// looksLikeFile says an argument names a file rather than a plan id.
func looksLikeFile(arg string) bool {
	ext := strings.ToLower(filepath.Ext(arg))
	return strings.ContainsAny(arg, `/\`) || ext == ".json" || ext == ".yaml" || ext == ".yml"
}

// captureList names captures for people, in order.
func captureList(ids []model.NodeID) string {
	out := ""
	for i, id := range ids {
		if i > 0 {
			out += ", "
		}
		out += string(id)
	}
	return out
}
