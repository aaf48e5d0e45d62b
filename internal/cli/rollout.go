package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

func newRolloutCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "rollout", Short: "Restart every capture in turn, as one plan (rolling restart or upgrade)"}
	cmd.AddCommand(newRolloutRestartCommand(o))
	return cmd
}

func newRolloutRestartCommand(o *options) *cobra.Command {
	var (
		batch    int
		captures []string
		f        planFlags
	)
	cmd := &cobra.Command{
		Use:   "restart",
		Short: "Restart captures one at a time: hand the coordinator role over, drain, restart, wait for it to be given work again",
		Long: `Restart captures one at a time, as one plan: for each capture in turn,
it hands the coordinator role over if it holds it, is drained as 'cdcctl
drain' drains it (its partitions move gracefully: exactly-once), is asked
to exit, comes back Alive when its service manager starts it again (a new
binary, for an upgrade), and is given its share of work again before the
next capture goes. The coordinator's capture goes last, so the role moves
once.

The agent exits with code 75 when asked; systemd (the unit's
RestartForceExitStatus=75), compose (restart: unless-stopped), Kubernetes
and the playground start it again. A capture that does not come back
stalls the plan (a 'stalled' event names it) until it does or the plan is
cancelled.

The plan is watchable, pausable and resumable like every plan, goes on
under a new coordinator, and takes the lag budget (--max-lag): it holds
before each next step while a changefeed lags over it.`,
		Example: `  cdcctl rollout restart --dry-run
  cdcctl rollout restart --yes --watch --max-lag 30s
  cdcctl rollout restart --captures capture-2,capture-3 --batch 2 --yes --watch -o json   # CI: NDJSON events`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if batch < 1 {
				return usageErr(fmt.Errorf("--batch must be at least 1, got %d", batch))
			}
			ids := make([]model.NodeID, len(captures))
			for i, c := range captures {
				ids[i] = model.NodeID(c)
			}
			return runPlan(cmd.Context(), o, &f, func(s *model.Snapshot) (*plan.Plan, error) {
				return plan.Rollout(s, ids, batch, plan.DefaultCosts)
			}, applyPlan)
		},
	}
	f.register(cmd, 60*time.Minute)
	cmd.Flags().IntVar(&batch, "batch", 1, "maintainers moved at once while each capture drains")
	cmd.Flags().StringSliceVar(&captures, "captures", nil, "the captures to restart, in this order (default: every Alive capture; the coordinator's goes last)")
	_ = cmd.RegisterFlagCompletionFunc("captures", completeCaptures(o))
	return cmd
}
