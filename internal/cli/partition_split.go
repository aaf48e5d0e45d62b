package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

func newPartitionSplitCommand(o *options) *cobra.Command {
	var (
		f   planFlags
		key string
	)
	cmd := &cobra.Command{
		Use:   "split PARTITION --key KEY",
		Short: "Split a partition's key range in two at KEY (a plan: show, approve, execute, watch)",
		Long: `Split one partition: its capture stops it at a final
position; the routing table is cut at KEY in one etcd transaction (the lower
half keeps the id, the upper half gets a new one); both halves start on the
same capture exactly where it stopped. KEY must lie strictly inside the
range ('cdcctl partition get ID'). Move a half afterwards with 'partition move'.`,
		Example: `  cdcctl partition split p7 --key m --dry-run
  cdcctl partition split p7 --key m --yes --watch`,
		Args:              exactArgs(1, "the partition to split"),
		ValidArgsFunction: firstArg(completePartitions(o)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("key") {
				return usageErr(fmt.Errorf("say where to cut with --key KEY (inside the partition's range: 'cdcctl partition get %s')", args[0]))
			}
			return runPlan(cmd.Context(), o, &f, func(s *model.Snapshot) (*plan.Plan, error) {
				return plan.Split(s, args[0], key, plan.DefaultCosts)
			}, applyPlan)
		},
	}
	f.register(cmd, 10*time.Minute)
	cmd.Flags().StringVar(&key, "key", "", "where to cut: the upper half starts at this key (a binary column in hex: 0x8F3A)")
	return cmd
}
