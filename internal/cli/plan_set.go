package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
)

// plan set changes a running plan's lag budget.
func newPlanSetCommand(o *options) *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "set ID --max-lag D [--resume-below D] [--hold-timeout D]",
		Short: "Change a running plan's lag budget (--max-lag 0 removes it)",
		Long: `Change the lag budget of a running or paused plan: while a changefeed the
plan acts on lags more than --max-lag, no step of it begins (running steps
finish); it goes on by itself below --resume-below (half of --max-lag by
default); held longer than --hold-timeout it fails (exit 9 for whoever
watches it). The new budget applies at the coordinator's next pass over the
plan; '--max-lag 0' removes the budget and a held plan goes on.`,
		Example: `  cdcctl plan set drain-capture-3-1764381234 --max-lag 5s
  cdcctl plan set drain-capture-3-1764381234 --max-lag 10s --resume-below 2s --hold-timeout 15m
  cdcctl plan set drain-capture-3-1764381234 --max-lag 0`,
		Args: exactArgs(1, "the plan id ('cdcctl plan list')"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("max-lag") {
				return usageErr(fmt.Errorf("give --max-lag (0 removes the budget)"))
			}
			b, err := f.budget()
			if err != nil {
				return err
			}
			req := api.SetBudgetRequest{SubmittedBy: submitter()}
			if b != nil {
				req.Budget = *b
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			p, err := c.SetPlanBudget(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return o.render(p, func(tw tableWriter) {
				if p.Budget == nil {
					fmt.Fprintf(tw, "Plan %s (%s) has no lag budget now.\n", p.ID, p.State)
					return
				}
				fmt.Fprintf(tw, "Plan %s (%s): lag budget max %s, going on below %s", p.ID, p.State, p.Budget.MaxLag, p.Budget.ResumeBelow)
				if p.Budget.HoldTimeout != "" {
					fmt.Fprintf(tw, ", failing when held over %s", p.Budget.HoldTimeout)
				}
				fmt.Fprintln(tw, ".")
			})
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.maxLag, "max-lag", 0, "the plan's new lag budget: no step begins while a changefeed it acts on lags more than this; 0 removes the budget")
	fl.DurationVar(&f.resumeBelow, "resume-below", 0, "a held plan goes on once the lag is below this (default: half of --max-lag)")
	fl.DurationVar(&f.holdTimeout, "hold-timeout", 0, "a plan held longer than this fails (exit 9); 0: it waits as long as it takes")
	return cmd
}
