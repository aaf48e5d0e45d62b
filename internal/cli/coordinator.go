package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
)

func newCoordinatorCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "coordinator", Short: "The elected coordinator"}
	cmd.AddCommand(newCoordinatorResignCommand(o))
	return cmd
}

func newCoordinatorResignCommand(o *options) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "resign",
		Short: "Hand the coordinator role to another Alive capture",
		Long: `Make the current coordinator give up its term so that another Alive capture
is elected. The coordinator cannot be drained, so this is how it is freed
for maintenance. Refused (exit 1) when no other capture could take over.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait <= 0 {
				return usageErr(fmt.Errorf("--wait must be positive, got %s", wait))
			}
			// The coordinator answers only after the hand-over (or --wait).
			c, err := o.clientWithTimeout(max(o.v.GetDuration("request-timeout"), wait+10*time.Second))
			if err != nil {
				return err
			}
			res, err := c.ResignCoordinator(cmd.Context(), api.ResignRequest{Wait: wait.String()})
			if err != nil {
				return err
			}
			return o.render(res, func(tw tableWriter) {
				fmt.Fprintf(tw, "Coordinator moved from %s (epoch %d) to %s (epoch %d).\n", res.Previous, res.PreviousEpoch, res.Coordinator, res.CoordinatorEpoch)
			})
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 15*time.Second, "how long the coordinator waits for another capture to take over")
	return cmd
}
