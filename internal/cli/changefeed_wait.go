package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

func newChangefeedWaitCommand(o *options) *cobra.Command {
	var advance, timeout time.Duration
	var state, table, noTable string
	var snapshot, caughtUp bool
	cmd := &cobra.Command{
		Use:   "wait NAME [--advance D | --caught-up | --state STATE | --snapshot | --table T | --no-table T]",
		Short: "Wait until a changefeed's checkpoint has advanced by D or caught up, or it is in a state (for scripts)",
		Long: `Wait until the changefeed's checkpoint is at least D later than it was when
the command started: proof that replication is moving. With --caught-up,
wait until the checkpoint has passed the moment the command started (by
the agents' clock, the one the lag is measured by): every change
committed upstream before then is in the sink, so a script can write,
wait and then verify, waiting only as long as the lag. With --state, wait
until the changefeed is in that state (normal, warning, paused, failed)
instead (warning: normal, but not advancing; its error says why). With
--table or --no-table, wait until the changefeed replicates a table, or
no longer does (a changefeed with table rules picks tables up and drops
them by itself). With --snapshot, wait until a database changefeed's
initial snapshot has copied every partition (its checkpoint moves while
it copies, so --advance does not say the copy is over); one without an
initial snapshot (not a database, or created with --snapshot never) is
refused at once. A changefeed that does not exist yet is waited for.
Exit 3 on --timeout; exit 1 at once if the changefeed fails while its
checkpoint is waited for.`,
		Args: exactArgs(1, "the changefeed's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch state {
			case "", string(model.ChangefeedNormal), string(model.ChangefeedWarning), string(model.ChangefeedPaused), string(model.ChangefeedFailed):
			default:
				return usageErr(fmt.Errorf("--state %q: use normal, warning, paused or failed", state))
			}
			if caughtUp && cmd.Flags().Changed("advance") {
				return usageErr(fmt.Errorf("--caught-up and --advance are two targets: use one"))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			// A changefeed being created (the playground's demo, a
			// runbook's previous step) is waited for too.
			first, err := c.Changefeed(ctx, args[0])
			for api.IsCode(err, api.CodeNotFound) {
				select {
				case <-ctx.Done():
					return withExit(ExitTimeout, fmt.Errorf("timed out after %s: changefeed %s does not exist", timeout, args[0]))
				case <-time.After(200 * time.Millisecond):
				}
				first, err = c.Changefeed(ctx, args[0])
			}
			if err != nil {
				return err
			}
			if table != "" || noTable != "" {
				return waitTable(ctx, o, c, args[0], table, noTable, timeout)
			}
			if snapshot {
				return waitSnapshot(ctx, o, c, first, timeout)
			}
			target := model.Ts(first.CheckpointTs) + model.TsFromMillis(advance.Milliseconds())
			if caughtUp {
				// The agent's now when it answered: its checkpoint plus
				// the lag it measured then. The operator's own clock may
				// be apart from the cluster's; the agents' is the one
				// every checkpoint and lag is read against.
				// The lag is in whole milliseconds, cut short: one more
				// is past a commit made within the last one (database
				// commits are at the microsecond).
				target = model.Ts(first.CheckpointTs) + model.TsFromMillis(first.CheckpointLagMs+1)
				if first.CheckpointTs == 0 {
					// No checkpoint yet, so no lag to read the
					// agent's clock by: this machine's.
					target = model.TsFromTimeMicros(time.Now())
				}
			}
			last := first
			for {
				cf, err := c.Changefeed(ctx, args[0])
				if err == nil {
					last = cf
				} else if !transient(err) {
					return err // removed, or a token refused: waiting changes nothing
				}
				if err == nil && state != "" && cf.State == state {
					return o.render(cf, func(tw tableWriter) { fmt.Fprintf(tw, "Changefeed %s is %s.\n", cf.ID, cf.State) })
				}
				if err == nil && state == "" && cf.State == string(model.ChangefeedFailed) {
					return fmt.Errorf("changefeed %s failed: %s", cf.ID, cf.Error)
				}
				if err == nil && state == "" && model.Ts(cf.CheckpointTs) >= target {
					return o.render(cf, func(tw tableWriter) {
						if caughtUp {
							fmt.Fprintf(tw, "Changefeed %s caught up: its checkpoint passed the start of the wait (lag %s).\n", cf.ID, time.Duration(cf.CheckpointLagMs)*time.Millisecond)
							return
						}
						fmt.Fprintf(tw, "Checkpoint of %s advanced by %s (lag %s).\n", cf.ID, model.Ts(cf.CheckpointTs).Time().Sub(model.Ts(first.CheckpointTs).Time()), time.Duration(cf.CheckpointLagMs)*time.Millisecond)
					})
				}
				select {
				case <-ctx.Done():
					if state != "" {
						return withExit(ExitTimeout, fmt.Errorf("timed out after %s: changefeed %s is not %s", timeout, args[0], state))
					}
					if caughtUp {
						return withExit(ExitTimeout, fmt.Errorf("timed out after %s: changefeed %s did not catch up (its checkpoint is %s short of the start, lag %s); 'cdcctl changefeed get %s' says why", timeout, args[0], target.Time().Sub(model.Ts(last.CheckpointTs).Time()).Round(time.Millisecond), time.Duration(last.CheckpointLagMs)*time.Millisecond, args[0]))
					}
					return withExit(ExitTimeout, fmt.Errorf("timed out after %s: the checkpoint of %s did not advance by %s", timeout, args[0], advance))
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&advance, "advance", 2*time.Second, "how far the checkpoint must move")
	cmd.Flags().BoolVar(&caughtUp, "caught-up", false, "wait until every change committed before the command started is in the sink")
	cmd.Flags().StringVar(&state, "state", "", "wait for this state instead: normal, warning, paused or failed")
	cmd.Flags().BoolVar(&snapshot, "snapshot", false, "wait until the initial snapshot has copied every partition (a database source)")
	cmd.Flags().StringVar(&table, "table", "", "wait until the changefeed replicates this table (schema.table)")
	cmd.Flags().StringVar(&noTable, "no-table", "", "wait until the changefeed no longer replicates this table")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "give up after this long (exit code 3)")
	return cmd
}

// waitSnapshot waits until a database changefeed's initial snapshot is
// done ("done (N rows copied)" in its source status).
func waitSnapshot(ctx context.Context, o *options, c *api.Client, cf *api.ChangefeedResponse, timeout time.Duration) error {
	for {
		if cf.SourceStatus == nil {
			return fmt.Errorf("changefeed %s has no initial snapshot to wait for: its source is not a database", cf.ID)
		}
		if u, err := url.Parse(cf.Source); err == nil && u.Query().Get("snapshot") == "never" {
			// Refused at once as a generator's is: no snapshot will
			// ever be done, and a wait would only time out.
			return fmt.Errorf("changefeed %s has no initial snapshot to wait for: it was created with snapshot=never (only changes from its creation on); to wait until it has replicated what was written before now, use --caught-up", cf.ID)
		}
		if strings.HasPrefix(cf.SourceStatus.Snapshot, "done") {
			return o.render(cf, func(tw tableWriter) {
				fmt.Fprintf(tw, "The initial snapshot of %s is %s.\n", cf.ID, cf.SourceStatus.Snapshot)
			})
		}
		select {
		case <-ctx.Done():
			progress := cf.SourceStatus.Snapshot
			if progress == "" {
				progress = "not begun"
			}
			return withExit(ExitTimeout, fmt.Errorf("timed out after %s: the initial snapshot of %s is not done: %s", timeout, cf.ID, progress))
		case <-time.After(200 * time.Millisecond):
		}
		next, err := c.Changefeed(ctx, cf.ID)
		if err == nil {
			cf = next
		} else if !transient(err) {
			return err
		}
	}
}

// waitTable waits until a changefeed has partitions of a table (want), or
// none of another (gone).
func waitTable(ctx context.Context, o *options, c *api.Client, id, want, gone string, timeout time.Duration) error {
	schema := "public"
	if want+gone != "" {
		// Names without a schema are in the source's default one (a
		// changefeed not there yet: PostgreSQL's, as before).
		if cf, err := c.Changefeed(ctx, id); err == nil {
			schema = defaultSchema(cf.Source)
		}
	}
	var err error
	if want != "" {
		if want, err = qualifyTable(want, schema); err != nil {
			return usageErr(fmt.Errorf("--table: %w", err))
		}
	}
	if gone != "" {
		if gone, err = qualifyTable(gone, schema); err != nil {
			return usageErr(fmt.Errorf("--no-table: %w", err))
		}
	}
	for {
		parts, err := c.Partitions(ctx, id, "")
		if err != nil && !transient(err) {
			return err
		}
		if err == nil {
			has := map[string]bool{}
			for _, p := range parts.Partitions {
				has[p.Table] = true
			}
			if (want == "" || has[want]) && (gone == "" || !has[gone]) {
				return o.render(parts, func(tw tableWriter) {
					if want != "" {
						fmt.Fprintf(tw, "Changefeed %s replicates %s.\n", id, want)
					}
					if gone != "" {
						fmt.Fprintf(tw, "Changefeed %s does not replicate %s.\n", id, gone)
					}
				})
			}
		}
		select {
		case <-ctx.Done():
			what := "still replicates " + gone
			if want != "" {
				what = "does not replicate " + want
			}
			return withExit(ExitTimeout, fmt.Errorf("timed out after %s: changefeed %s %s", timeout, id, what))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
