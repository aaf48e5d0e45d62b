package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/verify"
)

func newVerifyCommand(o *options) *cobra.Command {
	var changefeed string
	cmd := &cobra.Command{
		Use:   "verify --changefeed NAME",
		Short: "Prove that a changefeed's sink holds every event up to its checkpoint, in per-key order",
		Long: `Read what the changefeed's sink holds (storage files or a Kafka topic) and
check, for every key of every table, that every version the source produced
up to the changefeed's checkpoint is there, in per-key order. The gen source
is deterministic, so the expected content is computed.

Exit 0 when nothing is lost, out of order, corrupt or unknown; 1 otherwise.
Duplicates are reported, not judged: after a crash they are expected
(at-least-once); after graceful operations there should be none.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if changefeed == "" {
				return usageErr(fmt.Errorf("--changefeed is required"))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			cf, err := c.Changefeed(cmd.Context(), changefeed)
			if err != nil {
				return err
			}
			src, err := sources.Open(cmd.Context(), cf.Source)
			if err != nil {
				return fmt.Errorf("changefeed %s: %w", changefeed, err)
			}
			defer src.Close()
			want, ok := src.(source.Expectation)
			if !ok {
				return fmt.Errorf("cannot verify changefeed %s yet: its %s:// source is not deterministic, and comparing a sink with a database upstream is not built yet", changefeed, schemeOf(cf.Source))
			}
			upTo := model.Ts(cf.CheckpointTs)
			u, _ := url.Parse(cf.Sink)
			var rep verify.Report
			switch u.Scheme {
			case "kafka":
				rep, err = verify.Kafka(cmd.Context(), want, cf.Sink, upTo)
			case "file", "s3":
				rep, err = verify.Storage(cmd.Context(), want, cf.Sink, upTo)
			default:
				return fmt.Errorf("cannot verify a %s:// sink: it keeps nothing to read back (verify reads file://, s3://, gs://, azblob:// and kafka:// sinks)", u.Scheme)
			}
			if err != nil {
				return err
			}
			if rerr := o.render(rep, func(tw tableWriter) {
				verdict := "OK"
				if !rep.OK {
					verdict = "FAILED"
				}
				fmt.Fprintf(tw, "Verify %s:\t%s\n", changefeed, verdict)
				fmt.Fprintf(tw, "Checked up to:\t%s\n", upTo.Time().Format("2006-01-02 15:04:05.000Z07:00"))
				fmt.Fprintf(tw, "Tables / keys:\t%d / %d\n", rep.Tables, rep.Keys)
				fmt.Fprintf(tw, "Events expected / read:\t%d / %d\n", rep.Expected, rep.Events)
				fmt.Fprintf(tw, "Lost:\t%d\nOut of order:\t%d\nDuplicates:\t%d\nCorrupt:\t%d\nUnknown:\t%d\nMisplaced DDL:\t%d\n", rep.Lost, rep.OutOfOrder, rep.Duplicates, rep.Corrupt, rep.Unknown, rep.Misplaced)
				for _, ex := range rep.Examples {
					fmt.Fprintf(tw, "  %s\n", ex)
				}
			}); rerr != nil {
				return rerr
			}
			if !rep.OK {
				return withExit(ExitError, fmt.Errorf("verify found %d lost, %d out of order, %d corrupt, %d unknown events and %d misplaced DDLs", rep.Lost, rep.OutOfOrder, rep.Corrupt, rep.Unknown, rep.Misplaced))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&changefeed, "changefeed", "", "the changefeed to verify")
	return cmd
}

// schemeOf names a URI's scheme without anything else of it (a DSN may
// hold a password).
func schemeOf(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return "unknown"
	}
	return u.Scheme
}
