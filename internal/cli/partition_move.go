package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

func newPartitionMoveCommand(o *options) *cobra.Command {
	var (
		f  planFlags
		to string
	)
	cmd := &cobra.Command{
		Use:   "move PARTITION --to CAPTURE",
		Short: "Move a partition to a capture, gracefully (a plan: show, approve, execute, watch)",
		Long: `Move one partition, gracefully: it goes Draining (busy: other
operations on it are refused with exit 7), its capture stops it at a final
position, and the target starts exactly there: nothing lost, nothing
written twice. It stays pinned on the target: the balance scheduler leaves
it there (a drain or a failure still moves it).`,
		Example: `  cdcctl partition move p7 --to capture-1 --dry-run
  cdcctl partition move p7 --to capture-1 --yes --watch`,
		Args:              exactArgs(1, "the partition to move"),
		ValidArgsFunction: firstArg(completePartitions(o)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usageErr(fmt.Errorf("say where with --to CAPTURE ('cdcctl capture list')"))
			}
			return runPlan(cmd.Context(), o, &f, func(s *model.Snapshot) (*plan.Plan, error) {
				return plan.Move(s, args[0], model.NodeID(to), plan.DefaultCosts)
			}, applyPlan)
		},
	}
	f.register(cmd, 10*time.Minute)
	cmd.Flags().StringVar(&to, "to", "", "the capture to move it to")
	_ = cmd.RegisterFlagCompletionFunc("to", completeCaptures(o))
	return cmd
}
