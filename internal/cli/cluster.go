package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
)

// shortTimeout bounds reads that should answer at once.
const shortTimeout = 10 * time.Second

func newClusterCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Cluster-wide state"}
	cmd.AddCommand(newClusterStatusCommand(o), newClusterWaitCommand(o), newClusterSnapshotCommand(o))
	return cmd
}

func newClusterStatusCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the coordinator, its epoch and how many captures are in each state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			return o.render(st, func(tw tableWriter) { statusTable(tw, st) })
		},
	}
}

func statusTable(tw tableWriter, st *api.Status) {
	coord := "none elected"
	if st.Coordinator != "" {
		coord = fmt.Sprintf("%s (epoch %d, %s)", st.Coordinator, st.CoordinatorEpoch, st.CoordinatorAddress)
	}
	fmt.Fprintf(tw, "Cluster:\t%s\n", st.ClusterID)
	fmt.Fprintf(tw, "Coordinator:\t%s\n", coord)
	if st.Election == "mysql" {
		fmt.Fprintf(tw, "Election:\tmysql (lock epoch %d)\n", st.ElectionEpoch)
	} else if st.Election != "" {
		fmt.Fprintf(tw, "Election:\t%s\n", st.Election)
	}
	fmt.Fprintf(tw, "Captures:\t%d (%d Alive, %d Draining, %d Stopping)\n", st.Captures, st.Alive, st.Draining, st.Stopping)
	fmt.Fprintf(tw, "Answered by:\t%s (agent %s)\n", st.ServedBy, st.ServerVersion)
}

func newClusterWaitCommand(o *options) *cobra.Command {
	var (
		nodes    int
		exact    bool
		timeout  time.Duration
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Wait until the cluster has N Alive captures and a coordinator (for scripts)",
		Long: `Wait until at least --nodes captures are Alive (exactly, with --exact) and a
coordinator is elected, then print the status. Unreachable agents are
retried until --timeout; a timeout exits with code 3.`,
		Example: `  cdcctl cluster wait --nodes 3 --timeout 60s
  cdcctl cluster wait --nodes 2 --exact   # after stopping one of three`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 {
				return usageErr(fmt.Errorf("--nodes must be at least 1, got %d", nodes))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			want := fmt.Sprintf("at least %d Alive %s", nodes, plural(nodes, "capture", "captures"))
			if exact {
				want = fmt.Sprintf("exactly %d Alive %s", nodes, plural(nodes, "capture", "captures"))
			}
			var last string
			var lastErr error
			for {
				st, err := c.Status(ctx)
				if err == nil {
					lastErr = nil
					ok := st.Coordinator != "" && st.Alive >= nodes && (!exact || st.Alive == nodes)
					if ok {
						return o.render(st, func(tw tableWriter) { statusTable(tw, st) })
					}
					seen := fmt.Sprintf("%d Alive %s, coordinator %q", st.Alive, plural(st.Alive, "capture", "captures"), st.Coordinator)
					if seen != last {
						fmt.Fprintf(o.errOut, "waiting for %s and a coordinator: now %s\n", want, seen)
						last = seen
					}
				} else if !transient(err) {
					// A refused token or a bad request: waiting does not
					// change the answer, and its exit code says what does.
					return err
				} else if !errors.Is(err, context.DeadlineExceeded) {
					lastErr = err
				}
				select {
				case <-ctx.Done():
					msg := fmt.Sprintf("timed out after %s waiting for %s and a coordinator", timeout, want)
					if last != "" {
						msg += "; last seen: " + last
					}
					if lastErr != nil {
						msg += "; last error: " + lastErr.Error()
					}
					return withExit(ExitTimeout, errors.New(msg))
				case <-time.After(interval):
				}
			}
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 1, "number of Alive captures to wait for")
	f.BoolVar(&exact, "exact", false, "wait for exactly --nodes Alive captures, not at least")
	f.DurationVar(&timeout, "timeout", 60*time.Second, "give up after this long (exit code 3)")
	f.DurationVar(&interval, "interval", 250*time.Millisecond, "time between polls")
	return cmd
}
