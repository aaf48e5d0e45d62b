package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

// changefeed resnapshot is the operator's answer to a MySQL changefeed
// whose binary log was purged while it was stopped: never done by
// itself, shown first (a dry run), approved on a terminal or with --yes.
func newChangefeedResnapshotCommand(o *options) *cobra.Command {
	var dryRun, yes, resume bool
	cmd := &cobra.Command{
		Use:   "resnapshot NAME [--dry-run] [--yes] [--resume]",
		Short: "Copy every table of a failed MySQL changefeed again (its binary log was purged): the sink is truncated and refilled",
		Long: `Copy every table of a changefeed again, when it cannot go on from its
position: a MySQL changefeed whose binary log was purged while it was
stopped fails with that reason and waits for this choice (the other is
'cdcctl changefeed remove').

Its reader goes on from where the binary log ends now. Each partition is
replaced by one over the same key range that begins at the changefeed's
checkpoint and copies its range again (the initial snapshot, in chunks
between watermarks, under the live workload). The sink first gets a
TRUNCATE of every table, then their rows: afterwards it holds the tables
as they are, including the rows deleted while the binary log was lost.
Consumers see the TRUNCATE and the rows copied again.

The changefeed is left paused with its error cleared (--resume resumes
it at once). --dry-run shows what would be copied and exits 2.`,
		Example: `  cdcctl changefeed get shop        # failed: the binary log ... was purged
  cdcctl changefeed resnapshot shop --dry-run
  cdcctl changefeed resnapshot shop --yes --resume
  cdcctl changefeed wait shop --snapshot`,
		Args: exactArgs(1, "the changefeed's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			// A table whose key changed is cut anew, reading its keys'
			// quantiles: the coordinator gives that up to 10 minutes,
			// and the request waits for it.
			c, err := o.clientWithTimeout(max(o.v.GetDuration("request-timeout"), 11*time.Minute))
			if err != nil {
				return err
			}
			preview, err := c.ResnapshotChangefeed(cmd.Context(), id, api.ResnapshotRequest{DryRun: true})
			if err != nil {
				return err
			}
			if dryRun {
				if err := o.render(preview, func(tw tableWriter) { resnapshotText(tw, preview) }); err != nil {
					return err
				}
				return withExit(ExitDryRunChanges, errors.New("the re-snapshot has changes"))
			}
			if !yes {
				if !isTerminal(o.in) {
					return withExit(ExitError, fmt.Errorf("refusing to re-snapshot changefeed %s without --yes: stdin is not a terminal; review it with --dry-run, then run again with --yes", id))
				}
				if err := o.render(preview, func(tw tableWriter) { resnapshotText(tw, preview) }); err != nil {
					return err
				}
				fmt.Fprintf(o.errOut, "Truncate the sink's tables and copy them again? [y/N] ")
				answer, _ := bufio.NewReader(o.in).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return withExit(ExitCancelled, fmt.Errorf("re-snapshot changefeed %s: not approved; nothing changed", id))
				}
			}
			out, err := c.ResnapshotChangefeed(cmd.Context(), id, api.ResnapshotRequest{})
			if err != nil {
				return err
			}
			if resume {
				if _, err := c.ResumeChangefeed(cmd.Context(), id); err != nil {
					return fmt.Errorf("changefeed %s was re-snapshotted but not resumed: %w; resume it: cdcctl changefeed resume %s", id, err, id)
				}
			}
			return o.render(out, func(tw tableWriter) {
				resnapshotText(tw, out)
				if resume {
					fmt.Fprintf(tw, "Changefeed %s re-snapshotted and resumed; follow its copy: cdcctl changefeed wait %s --snapshot\n", id, id)
				} else {
					fmt.Fprintf(tw, "Changefeed %s re-snapshotted and paused; resume it to copy: cdcctl changefeed resume %s\n", id, id)
				}
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&dryRun, "dry-run", false, "show what would be copied again and exit 2; nothing is written")
	f.BoolVar(&yes, "yes", false, "re-snapshot without asking (scripts)")
	f.BoolVar(&resume, "resume", false, "resume the changefeed once it is re-snapshotted")
	return cmd
}

// resnapshotText shows a re-snapshot: each table with its partitions.
func resnapshotText(tw tableWriter, u *api.ChangefeedUpdateResponse) {
	verb := "is"
	if u.DryRun {
		verb = "would be"
	}
	fmt.Fprintf(tw, "Changefeed %s %s re-snapshotted at its checkpoint %s: the sink gets a TRUNCATE of each table, then all its rows again.\n",
		u.Changefeed, verb, model.Ts(u.At).Time().UTC().Format("2006-01-02 15:04:05.000"))
	rekeyed := map[string]api.RekeyedTable{}
	for _, r := range u.Rekeyed {
		rekeyed[r.Table] = r
	}
	recut := 0
	for _, t := range u.Added {
		n := 0
		for _, p := range u.AddedPartitions {
			if p.Table == t {
				n++
			}
		}
		line := fmt.Sprintf("  %s\t%d %s copied again", t, n, plural(n, "partition", "partitions"))
		if r, ok := rekeyed[t]; ok {
			if r.To == "" {
				line += ", now without a primary key"
			} else {
				line += ", under its primary key as it is now, " + r.To
			}
			if r.From != "" {
				line += " (its partitions were cut on " + r.From + ")"
			}
			if r.Recut {
				recut++
				line += "; its key ranges cut anew, the old ones' bounds being keys of the old key"
			}
		}
		fmt.Fprintln(tw, line)
	}
	if recut == 0 {
		fmt.Fprintf(tw, "Partitions replaced: %d (the same key ranges, new ids)\n", len(u.RemovedPartitions))
	} else {
		fmt.Fprintf(tw, "Partitions replaced: %d by %d (new ids; the same key ranges but for the %d %s cut anew)\n",
			len(u.RemovedPartitions), len(u.AddedPartitions), recut, plural(recut, "table", "tables"))
	}
}
