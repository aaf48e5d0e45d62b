package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

func newVerifyCommand(o *options) *cobra.Command {
	var (
		changefeed  string
		waitTimeout time.Duration
		readTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "verify --changefeed NAME",
		Short: "Prove that a changefeed's sink holds every event up to its checkpoint, in per-key order",
		Long: `Read what the changefeed's sink holds (storage files or a Kafka topic) and
check, for every key of every table, that every version the source produced
up to the changefeed's checkpoint is there, in per-key order. The gen source
is deterministic, so the expected content is computed.

For a database source (postgres://), verify rebuilds every table from the
sink (a storage sink's canal-json or CSV files, or a Kafka topic's
canal-json messages) and compares it with the upstream's rows read at
one consistent point, once the checkpoint has passed that point: rows
missing, extra and different, per table. Rows that differ are read again
(up to three rounds), so rows written during the check are not reported
lost. The agent reads the upstream and the sink with the changefeed's own
credentials.

For a sink with transaction-meta=true, verify also checks the transaction
boundaries up to that point as a consumer applying each transaction at once
relies on them: every transaction has its BEGIN and END records, the END's
counts are the rows the sink holds of it (in all and per table), and each
table's data_collection_order runs 1..n.

Exit 0 when nothing is lost, out of order, corrupt or unknown (and every
transaction is whole); 1 otherwise.
Duplicates are reported, not judged: after a crash they are expected
(at-least-once); after graceful operations there should be none. A sink
with delivery=exactly-once is judged on them too: any fails the verify.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if changefeed == "" {
				return usageErr(fmt.Errorf("--changefeed is required"))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			// An agent reads the sink and the upstream: this tool links
			// neither. The wait is the agent's; the call is given that and
			// --timeout to read.
			ctx, cancel := context.WithTimeout(cmd.Context(), waitTimeout+readTimeout)
			defer cancel()
			rep, err := c.Verify(ctx, changefeed, api.VerifyRequest{WaitMs: waitTimeout.Milliseconds()})
			if errors.Is(err, context.DeadlineExceeded) && cmd.Context().Err() == nil {
				return withExit(ExitTimeout, fmt.Errorf("verify of %s did not finish within --wait %s + --timeout %s: the sink or the upstream is large or slow to read; raise --timeout", changefeed, waitTimeout, readTimeout))
			}
			if err != nil {
				return err
			}
			return renderVerify(o, changefeed, model.Ts(rep.CheckedUpToTs), *rep)
		},
	}
	cmd.Flags().StringVar(&changefeed, "changefeed", "", "the changefeed to verify")
	var sourcePassword, sinkPassword string
	cmd.Flags().StringVar(&sourcePassword, "source-password", "", "unused: the agent verifies with the changefeed's own credentials")
	cmd.Flags().StringVar(&sinkPassword, "sink-password", "", "unused: the agent verifies with the changefeed's own credentials")
	_ = cmd.Flags().MarkDeprecated("source-password", "the agent verifies with the changefeed's own credentials; drop the flag")
	_ = cmd.Flags().MarkDeprecated("sink-password", "the agent verifies with the changefeed's own credentials; drop the flag")
	cmd.Flags().DurationVar(&waitTimeout, "wait", time.Minute, "how long to wait for the checkpoint to pass the upstream's read (database sources)")
	cmd.Flags().DurationVar(&readTimeout, "timeout", 10*time.Minute, "how long the agent may take to read the sink and the upstream, beyond --wait")
	return cmd
}

// renderVerify prints a report and returns the verdict as an exit code.
func renderVerify(o *options, changefeed string, upTo model.Ts, rep model.VerifyReport) error {
	if rerr := o.render(rep, func(tw tableWriter) {
		verdict := "OK"
		if !rep.OK {
			verdict = "FAILED"
		}
		fmt.Fprintf(tw, "Verify %s:\t%s\n", changefeed, verdict)
		fmt.Fprintf(tw, "Checked up to:\t%s\n", upTo.Time().Format("2006-01-02 15:04:05.000Z07:00"))
		if len(rep.TableReports) > 0 {
			fmt.Fprintf(tw, "Changes applied:\t%d\n", rep.Events)
			for _, t := range rep.TableReports {
				fmt.Fprintf(tw, "%s:\t%d rows upstream, %d in the sink; %d missing, %d extra, %d different\n", t.Table, t.UpstreamRows, t.SinkRows, t.Missing, t.Extra, t.Different)
			}
			if rep.OutOfOrder > 0 {
				fmt.Fprintf(tw, "Out of order:\t%d changes a writer wrote out of commit order\n", rep.OutOfOrder)
			}
			if rep.Misplaced > 0 {
				fmt.Fprintf(tw, "Misplaced:\t%d changes in another table version's files\n", rep.Misplaced)
			}
		} else {
			fmt.Fprintf(tw, "Tables / keys:\t%d / %d\n", rep.Tables, rep.Keys)
			fmt.Fprintf(tw, "Events expected / read:\t%d / %d (%d committed after the checked point, %d duplicates)\n", rep.Expected, rep.Events, rep.Beyond, rep.Duplicates)
			fmt.Fprintf(tw, "Lost:\t%d\nOut of order:\t%d\nDuplicates:\t%d\nCorrupt:\t%d\nUnknown:\t%d\nMisplaced DDL:\t%d\n", rep.Lost, rep.OutOfOrder, rep.Duplicates, rep.Corrupt, rep.Unknown, rep.Misplaced)
		}
		if t := rep.Transactions; t != nil {
			verdict := "every one whole"
			if len(t.Problems) > 0 {
				verdict = fmt.Sprintf("%d problems", len(t.Problems))
			}
			fmt.Fprintf(tw, "Transactions:\t%d committed up to the checked point, %s (%d records or rows read twice)\n", t.Checked, verdict, t.Duplicates)
			for _, p := range t.Problems {
				fmt.Fprintf(tw, "  %s\n", p)
			}
		}
		for _, nv := range rep.NotVerified {
			fmt.Fprintf(tw, "%s\n", nv)
		}
		for _, ex := range rep.Examples {
			fmt.Fprintf(tw, "  %s\n", ex)
		}
	}); rerr != nil {
		return rerr
	}
	if !rep.OK {
		if len(rep.TableReports) > 0 {
			equal := rep.Lost+rep.Unknown+rep.Corrupt+rep.OutOfOrder+rep.Misplaced == 0
			switch {
			case equal && rep.Transactions != nil && len(rep.Transactions.Problems) > 0:
				return withExit(ExitError, fmt.Errorf("verify found the tables equal and %d problems with the transaction boundaries a consumer relies on", len(rep.Transactions.Problems)))
			case equal && rep.Duplicates > 0:
				return withExit(ExitError, fmt.Errorf("verify found the tables equal and %d changes written twice into a sink that delivers exactly once", rep.Duplicates))
			case rep.OutOfOrder+rep.Misplaced > 0:
				return withExit(ExitError, fmt.Errorf("verify found %d rows missing, %d extra and %d different, %d changes written out of commit order and %d in another table version's files", rep.Lost, rep.Unknown, rep.Corrupt, rep.OutOfOrder, rep.Misplaced))
			}
			return withExit(ExitError, fmt.Errorf("verify found %d rows missing, %d extra and %d different", rep.Lost, rep.Unknown, rep.Corrupt))
		}
		if rep.Lost+rep.OutOfOrder+rep.Corrupt+rep.Unknown+rep.Misplaced == 0 && rep.Duplicates > 0 {
			return withExit(ExitError, fmt.Errorf("verify found %d events written twice into a sink that delivers exactly once", rep.Duplicates))
		}
		return withExit(ExitError, fmt.Errorf("verify found %d lost, %d out of order, %d corrupt, %d unknown events and %d misplaced DDLs", rep.Lost, rep.OutOfOrder, rep.Corrupt, rep.Unknown, rep.Misplaced))
	}
	return nil
}
