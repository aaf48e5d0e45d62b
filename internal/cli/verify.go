package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/redact"
	"github.com/cdcctl/cdcctl/internal/verify"
)

// withSinkPassword puts the Kafka sink's SASL password back into a sink
// URI the API showed masked.
func withSinkPassword(uri, password string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", err
	}
	q := u.Query()
	if q.Get("sasl-password") != redact.Mask {
		return uri, nil
	}
	if password == "" {
		return "", fmt.Errorf("the sink's sasl-password is not shown by the API: pass --sink-password or set CDCCTL_SINK_PASSWORD")
	}
	q.Set("sasl-password", password)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func newVerifyCommand(o *options) *cobra.Command {
	var (
		changefeed     string
		sourcePassword string
		sinkPassword   string
		waitTimeout    time.Duration
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
lost. The upstream's password, which the API does not show, comes from
--source-password or PGPASSWORD.

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
			src, err := sources.Open(cmd.Context(), cf.Source, source.Env{Changefeed: model.ChangefeedID(changefeed)})
			if err != nil {
				return fmt.Errorf("changefeed %s: %w", changefeed, err)
			}
			defer src.Close()
			upTo := model.Ts(cf.CheckpointTs)
			u, _ := url.Parse(cf.Sink)
			var rep verify.Report
			want, deterministic := src.(source.Expectation)
			if !deterministic {
				up, tables, err := sources.Upstream(cf.Source, sourcePassword)
				if err != nil {
					return fmt.Errorf("changefeed %s: %w", changefeed, err)
				}
				// A held table holds the checkpoint below it: nothing after
				// the hold can be compared. A dropped one has no upstream.
				var held, notVerified []string
				for _, ti := range cf.TableIssues {
					switch ti.State {
					case model.TableHeld:
						held = append(held, tableIssueLine(ti))
					case model.TableDropped:
						tables = slices.DeleteFunc(tables, func(t string) bool { return t == ti.Table })
						notVerified = append(notVerified, ti.Table+": dropped upstream, not verified")
					}
				}
				if len(held) > 0 {
					return fmt.Errorf("cannot verify changefeed %s: it holds %d %s, and its checkpoint stays below the hold, so the sink cannot be compared at a point after it; resolve the hold first:\n  %s",
						changefeed, len(held), plural(len(held), "table", "tables"), strings.Join(held, "\n  "))
				}
				sinkURI := cf.Sink
				switch {
				case up == nil || (u.Scheme != "file" && u.Scheme != "s3" && u.Scheme != "kafka"):
					return fmt.Errorf("cannot verify changefeed %s: a %s:// source is compared with its upstream by rebuilding tables from a storage sink (file:// or s3://) or a Kafka topic, and this one writes to %s://", changefeed, schemeOf(cf.Source), u.Scheme)
				case u.Scheme == "kafka":
					if sinkURI, err = withSinkPassword(cf.Sink, sinkPassword); err != nil {
						return fmt.Errorf("changefeed %s: %w", changefeed, err)
					}
				}
				wait := func(ctx context.Context, ts model.Ts) (model.Ts, error) {
					return waitCheckpoint(ctx, c, changefeed, ts, waitTimeout)
				}
				rep, err = verify.Database(cmd.Context(), sinkURI, up, tables, wait)
				if err != nil {
					return err
				}
				rep.NotVerified = append(notVerified, rep.NotVerified...)
				return renderVerify(o, changefeed, model.Ts(rep.CheckedUpToTs), rep)
			}
			switch u.Scheme {
			case "kafka":
				var sinkURI string
				if sinkURI, err = withSinkPassword(cf.Sink, sinkPassword); err != nil {
					return fmt.Errorf("changefeed %s: %w", changefeed, err)
				}
				rep, err = verify.Kafka(cmd.Context(), want, sinkURI, upTo)
			case "file", "s3":
				rep, err = verify.Storage(cmd.Context(), want, cf.Sink, upTo)
			default:
				return fmt.Errorf("cannot verify a %s:// sink: it keeps nothing to read back (verify reads file://, s3://, gs://, azblob:// and kafka:// sinks)", u.Scheme)
			}
			if err != nil {
				return err
			}
			return renderVerify(o, changefeed, upTo, rep)
		},
	}
	cmd.Flags().StringVar(&changefeed, "changefeed", "", "the changefeed to verify")
	cmd.Flags().StringVar(&sourcePassword, "source-password", "", "the database source's password (the API does not show it; default PGPASSWORD)")
	cmd.Flags().StringVar(&sinkPassword, "sink-password", os.Getenv("CDCCTL_SINK_PASSWORD"), "the Kafka sink's sasl-password (the API does not show it; default CDCCTL_SINK_PASSWORD)")
	cmd.Flags().DurationVar(&waitTimeout, "wait", time.Minute, "how long to wait for the checkpoint to pass the upstream's read (database sources)")
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

// renderVerify prints a report and returns the verdict as an exit code.
func renderVerify(o *options, changefeed string, upTo model.Ts, rep verify.Report) error {
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
		} else {
			fmt.Fprintf(tw, "Tables / keys:\t%d / %d\n", rep.Tables, rep.Keys)
			fmt.Fprintf(tw, "Events expected / read:\t%d / %d (%d committed after the checked point, %d duplicates)\n", rep.Expected, rep.Events, rep.Beyond, rep.Duplicates)
			fmt.Fprintf(tw, "Lost:\t%d\nOut of order:\t%d\nDuplicates:\t%d\nCorrupt:\t%d\nUnknown:\t%d\nMisplaced DDL:\t%d\n", rep.Lost, rep.OutOfOrder, rep.Duplicates, rep.Corrupt, rep.Unknown, rep.Misplaced)
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
			return withExit(ExitError, fmt.Errorf("verify found %d rows missing, %d extra and %d different", rep.Lost, rep.Unknown, rep.Corrupt))
		}
		return withExit(ExitError, fmt.Errorf("verify found %d lost, %d out of order, %d corrupt, %d unknown events and %d misplaced DDLs", rep.Lost, rep.OutOfOrder, rep.Corrupt, rep.Unknown, rep.Misplaced))
	}
	return nil
}

// waitCheckpoint polls a changefeed until its checkpoint reaches ts.
func waitCheckpoint(ctx context.Context, c *api.Client, cf string, ts model.Ts, timeout time.Duration) (model.Ts, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		got, err := c.Changefeed(ctx, cf)
		if err == nil && model.Ts(got.CheckpointTs) >= ts {
			return model.Ts(got.CheckpointTs), nil
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("the checkpoint of %s did not reach %s within %s; is it running? ('cdcctl changefeed get %s' shows its state and any error)", cf, ts.Time().Format(time.RFC3339Nano), timeout, cf)
		case <-t.C:
		}
	}
}
