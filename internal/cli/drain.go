package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/charmbracelet/x/term"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// errDryRunChanges ends a dry run that found work to do: exit 2, nothing
// printed as an error (Terraform's -detailed-exitcode convention).
var errDryRunChanges = withExit(ExitDryRunChanges, errors.New("the plan has changes"))

func newDrainCommand(o *options) *cobra.Command {
	var (
		batch int
		f     planFlags
	)
	cmd := &cobra.Command{
		Use:   "drain CAPTURE",
		Short: "Move all work off a capture, then stop it (plan, show, approve, execute, watch)",
		Long: `Drain a capture for maintenance: it goes Draining (no new work, never
coordinator); its maintainers move in batches of at most --batch to the
least-loaded captures; their partitions follow, gracefully (exactly-once);
when nothing is left it goes Stopping.

The plan is computed from the cluster's snapshot and shown first. On a
terminal cdcctl asks [y/N]; elsewhere it refuses without --yes.
--dry-run shows the plan and exits 2 (changes) without doing anything.`,
		Example: `  cdcctl drain capture-3 --dry-run
  cdcctl drain capture-3 --batch 2 --watch
  cdcctl drain capture-3 --batch 2 --yes --watch --timeout 10m -o json   # CI: NDJSON events`,
		Args:              exactArgs(1, "the capture to drain"),
		ValidArgsFunction: firstArg(completeDrainable(o)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkBatch(batch); err != nil {
				return err
			}
			return runPlan(cmd.Context(), o, &f, func(s *model.Snapshot) (*plan.Plan, error) {
				return plan.Drain(s, model.NodeID(args[0]), batch, plan.DefaultCosts)
			}, applyDrain)
		},
	}
	f.register(cmd, 30*time.Minute)
	cmd.Flags().IntVar(&batch, "batch", 1, "maintainers moved at once")
	cmd.AddCommand(newDrainStatusCommand(o))
	return cmd
}

func newDrainStatusCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "status CAPTURE",
		Short: "Show a capture's drain status: what is left on it",
		Args:  exactArgs(1, "the capture"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			st, err := c.DrainStatus(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.render(st, func(tw tableWriter) { fmt.Fprintln(tw, drainLine(args[0], st)) })
		},
	}
}

func drainLine(target string, st *api.DrainStatusResponse) string {
	disp := 0
	for _, n := range st.RemainingDispatcherCount {
		disp += n
	}
	state := "draining"
	if !st.IsDraining {
		state = "not draining"
	}
	return fmt.Sprintf("%s: %s, %s, %d maintainers and %d dispatchers remaining", target, st.Liveness, state, st.RemainingMaintainerCount, disp)
}

// applyDrain asks for approval (unless yes), submits the drain plan
// exactly as shown (the cluster refuses it, exit 5, if anything it read
// changed since) and, with watch, follows it to its end.
func applyDrain(ctx context.Context, o *options, c *api.Client, snap *model.Snapshot, p *plan.Plan, f *planFlags) error {
	target := p.Target
	if err := approve(o, snap, p, "Drain "+string(target), f.yes); err != nil {
		return err
	}
	budget, err := f.budget()
	if err != nil {
		return err
	}
	res, err := c.Drain(ctx, string(target), api.DrainRequest{Batch: p.BatchSize, Plan: p, SubmittedBy: submitter(), Paused: f.paused, Budget: budget})
	if err != nil {
		return err
	}
	if !f.watch {
		return o.render(res, func(tw tableWriter) {
			if f.paused {
				fmt.Fprintf(tw, "Drain of %s submitted paused (epoch %d, plan %s): it is Draining; its maintainers move when you run 'cdcctl plan resume %s'.\n", target, res.Epoch, res.PlanID, res.PlanID)
				return
			}
			fmt.Fprintf(tw, "Drain of %s started (epoch %d, plan %s): %d maintainers and %d dispatchers to move.\n", target, res.Epoch, res.PlanID, res.CurrentMaintainerCount, res.CurrentDispatcherCount)
			fmt.Fprintf(tw, "Follow it with: cdcctl plan watch %s\n", res.PlanID)
		})
	}
	rec, err := followPlan(ctx, o, c, res.PlanID, f.timeout, nil)
	if err != nil {
		return err
	}
	printDrainEnd(ctx, o, c, rec, target)
	return nil
}

// printDrainEnd says where a drain the command followed to its end left
// the capture. Nothing after a detach (the drain goes on) or in
// structured output, whose last line is the plan's last event.
func printDrainEnd(ctx context.Context, o *options, c *api.Client, rec *exec.Record, target model.NodeID) {
	if rec == nil || rec.State != exec.Done || (o.output() != formatTable && o.output() != formatWide) {
		return
	}
	if st, err := c.DrainStatus(ctx, string(target)); err == nil {
		fmt.Fprintf(o.out, "drain complete: %s is %s\n", target, st.Liveness)
	}
}

// approve asks the operator to approve a plan (shown first) on a
// terminal; off a terminal only --yes approves.
func approve(o *options, snap *model.Snapshot, p *plan.Plan, question string, yes bool) error {
	if yes {
		return nil
	}
	if !isTerminal(o.in) {
		return withExit(ExitError, fmt.Errorf("refusing to %s without --yes: stdin is not a terminal; review the plan with --dry-run, then run again with --yes", strings.ToLower(question[:1])+question[1:]))
	}
	_ = plan.Render(o.out, snap, p)
	fmt.Fprintf(o.errOut, "\n%s? [y/N] ", question)
	answer, _ := bufio.NewReader(o.in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return withExit(ExitCancelled, fmt.Errorf("%s: not approved; nothing changed", strings.ToLower(question[:1])+question[1:]))
	}
	return nil
}

// submitter names who submits a plan, for its audit record.
func submitter() string {
	u := os.Getenv("USER")
	if u == "" {
		// A container's root, a cron job: $USER is often unset there.
		if cur, err := user.Current(); err == nil {
			u = cur.Username
		}
	}
	h, _ := os.Hostname()
	return cmp.Or(u, "unknown") + "@" + h
}

// isTerminal reports whether r is an interactive terminal: a TTY, asked
// of the terminal driver. A character device is not enough: /dev/null is
// one, and a script run with </dev/null was taken for an operator (a
// drain prompted and read no answer; a --watch started the live view).
func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(f.Fd())
}

// checkBatch refuses a --batch the planner would refuse, as bad flags
// (64) before anything is planned or written: above plan.MaxBatch a dry
// run wrote a plan file that plan apply then refused.
func checkBatch(batch int) error {
	if batch < 1 || batch > plan.MaxBatch {
		return usageErr(fmt.Errorf("--batch must be between 1 and %d, got %d", plan.MaxBatch, batch))
	}
	return nil
}
