package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

func newPartitionRebalanceCommand(o *options) *cobra.Command {
	var (
		f          planFlags
		changefeed string
		batch      int
		movePinned bool
	)
	cmd := &cobra.Command{
		Use:   "rebalance --changefeed CHANGEFEED",
		Short: "Even out a changefeed's partitions over the Alive captures, fewest moves first (a plan)",
		Example: `  cdcctl partition rebalance --changefeed demo --dry-run
  cdcctl partition rebalance --changefeed demo --batch 4 --yes --watch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if changefeed == "" {
				return usageErr(fmt.Errorf("say which with --changefeed ('cdcctl changefeed list')"))
			}
			if err := checkBatch(batch); err != nil {
				return err
			}
			return runPlan(cmd.Context(), o, &f, func(s *model.Snapshot) (*plan.Plan, error) {
				return plan.Rebalance(s, model.ChangefeedID(changefeed), batch, movePinned, plan.DefaultCosts)
			}, applyPlan)
		},
	}
	f.register(cmd, 10*time.Minute)
	cmd.Flags().StringVar(&changefeed, "changefeed", "", "the changefeed whose partitions to even out")
	cmd.Flags().IntVar(&batch, "batch", 4, "partitions moved at once")
	cmd.Flags().BoolVar(&movePinned, "move-pinned", false, "also move partitions an operator placed by hand (they lose their pin)")
	return cmd
}
