package cli

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// planDiff is `plan diff -o json`: two plans compared, or a plan checked
// against a later snapshot.
type planDiff struct {
	Version int              `json:"version"`
	A       string           `json:"a"`
	B       string           `json:"b"`
	Against string           `json:"against"` // "plan" or "snapshot"
	Plans   *plan.Comparison `json:"plans,omitempty"`
	// Stale and Changed: against a snapshot, whether the plan would be
	// refused and what it read that changed.
	Stale   bool          `json:"stale"`
	Changed []plan.Change `json:"changed,omitempty"`
}

func newPlanDiffCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "diff PLAN PLAN|SNAPSHOT",
		Short: "Compare two saved plans, or check a saved plan against a later snapshot (no cluster asked)",
		Long: `Compare two plan files (--plan-out): the steps only one makes, and the
objects they read at different revisions; exit 0 when they make the same
steps, 2 when they differ.

Or check a plan file against a 'cdcctl cluster snapshot' file taken
later: what the plan read that has changed since, as 'plan apply' would
refuse it; exit 0 when it still holds, 5 when it is stale. Neither asks
the cluster: a change review can run in a ticket before a maintenance
window.`,
		Example: `  cdcctl plan diff monday.json friday.json
  cdcctl plan diff drain.json snapshot-now.json`,
		Args: exactArgs(2, "two plan files, or a plan file and a snapshot file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := readPlanFile(args[0])
			if err != nil {
				return err
			}
			out := planDiff{Version: api.SchemaVersion, A: args[0], B: args[1]}
			if isSnapshotFile(args[1]) {
				snap, err := readSnapshotFile(args[1])
				if err != nil {
					return err
				}
				out.Against, out.Changed = "snapshot", plan.Check(a, &snap.Snapshot)
				out.Stale = len(out.Changed) > 0
				err = o.render(out, func(tw tableWriter) {
					if !out.Stale {
						fmt.Fprintf(tw, "The plan in %s still holds against %s (taken %s): nothing it read has changed.\n", args[0], args[1], snap.TakenAt.Format("2006-01-02 15:04:05Z"))
						return
					}
					fmt.Fprintf(tw, "The plan in %s is stale against %s (taken %s): %d object(s) it read changed:\n", args[0], args[1], snap.TakenAt.Format("2006-01-02 15:04:05Z"), len(out.Changed))
					for _, ch := range out.Changed {
						fmt.Fprintf(tw, "  %s\n", ch)
					}
				})
				if err == nil && out.Stale {
					return withExit(ExitStalePlan, fmt.Errorf("the plan in %s is stale against %s; compute it again", args[0], args[1]))
				}
				return err
			}
			b, err := readPlanFile(args[1])
			if err != nil {
				return err
			}
			c := plan.Compare(a, b)
			out.Against, out.Plans = "plan", &c
			if err := o.render(out, func(tw tableWriter) { plan.RenderComparison(tw, args[0], args[1], c) }); err != nil {
				return err
			}
			if !c.Same {
				return errPlansDiffer
			}
			return nil
		},
	}
}

// errPlansDiffer ends a diff that found differences: exit 2, nothing
// printed as an error (diff(1)'s convention, shifted past 1 = error).
var errPlansDiffer = withExit(ExitDryRunChanges, fmt.Errorf("the plans differ"))

// isSnapshotFile says whether path holds a `cluster snapshot` file
// rather than a plan.
func isSnapshotFile(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var head struct {
		Kind string `json:"kind"`
	}
	return json.Unmarshal(b, &head) == nil && head.Kind == snapshotKind
}
