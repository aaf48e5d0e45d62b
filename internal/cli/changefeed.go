package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

func newChangefeedCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "changefeed", Aliases: []string{"changefeeds", "cf"}, Short: "Changefeeds: replication tasks from a source to a sink"}
	cmd.AddCommand(newChangefeedCreateCommand(o), newChangefeedListCommand(o), newChangefeedGetCommand(o),
		newChangefeedStateCommand(o, "pause"), newChangefeedStateCommand(o, "resume"), newChangefeedUpdateCommand(o), newChangefeedResnapshotCommand(o), newChangefeedRemoveCommand(o),
		newChangefeedWaitCommand(o))
	return cmd
}

func changefeedTable(tw tableWriter, cfs []api.Changefeed) {
	if tw.wide {
		tw.header("ID\tSTATE\tCHECKPOINT\tLAG\tMAINTAINER\tPARTITIONS\tSINK\tSOURCE\tPER TABLE\tCREATED\tBY")
	} else {
		tw.header("ID\tSTATE\tCHECKPOINT\tLAG\tMAINTAINER\tPARTITIONS\tSINK")
	}
	for _, cf := range cfs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s", cf.ID, cf.State, model.Ts(cf.CheckpointTs).Time().Format("15:04:05.000"),
			(time.Duration(cf.CheckpointLagMs) * time.Millisecond).Round(time.Millisecond), cf.Maintainer, cf.Partitions, cf.Sink)
		if tw.wide {
			fmt.Fprintf(tw, "\t%s\t%d\t%s\t%s", cf.Source, cf.PartitionsPerTable, cf.CreatedAt.UTC().Format(time.RFC3339), orDash(cf.CreatedBy))
		}
		fmt.Fprintln(tw)
	}
	// Why a changefeed is failed or held back, and what to do, under the
	// table: one line each.
	for _, cf := range cfs {
		if cf.Error != "" {
			fmt.Fprintf(tw, "%s %s: %s\n", cf.ID, cf.State, cf.Error)
		}
		for _, ti := range cf.TableIssues {
			fmt.Fprintf(tw, "%s %s: %s\n", cf.ID, cf.State, ti.Line())
		}
	}
}

// labelled writes lines under a label given on the first only.
func labelled(tw tableWriter, label string, lines []string) {
	for i, l := range lines {
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, l)
	}
}

func newChangefeedCreateCommand(o *options) *cobra.Command {
	var req api.ChangefeedCreateRequest
	var snapshot, sourceFile, sinkFile string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "create NAME (--source URI | --source-file FILE) (--sink URI | --sink-file FILE)",
		Short: "Create a changefeed; each table is cut into --partitions-per-table key ranges",
		Example: `  cdcctl changefeed create demo --source 'gen://?tables=8&keys=10000&rate=2000' --sink 'file:///tmp/demo-sink'
  cdcctl changefeed create orders --source 'gen://?tables=2' --sink 'kafka://127.0.0.1:9092/orders?protocol=canal-json'
  cdcctl changefeed create shop --source 'postgres://cdc@db:5432/shop?tables=public.orders' --sink 'file:///var/lib/cdc/shop' --snapshot never
  cdcctl changefeed create shop --source-file /run/secrets/shop-source --sink 'file:///var/lib/cdc/shop'`,
		Args: exactArgs(1, "the changefeed's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if isStdin(sourceFile) && isStdin(sinkFile) {
				return errTwoStdin
			}
			var err error
			if req.Source, err = o.uriFlag("source", req.Source, sourceFile); err != nil {
				return err
			}
			if req.Sink, err = o.uriFlag("sink", req.Sink, sinkFile); err != nil {
				return err
			}
			if req.Source == "" || req.Sink == "" {
				return usageErr(errors.New("--source (or --source-file) and --sink (or --sink-file) are required"))
			}
			req.ID = args[0]
			// Checked here, a flag's error (exit 64): the API takes 0
			// (absent) for the default, but the flag's default is 4
			// already, so a 0 given is a mistake, not a wish for 4.
			if n := req.PartitionsPerTable; n < 1 || n > model.MaxPartitionsPerTable {
				return usageErr(fmt.Errorf("--partitions-per-table %d is out of range: use 1 to %d (default 4)", n, model.MaxPartitionsPerTable))
			}
			if snapshot != "" {
				src, err := withSnapshot(req.Source, snapshot)
				if err != nil {
					return usageErr(err)
				}
				req.Source = src
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			if dryRun {
				return previewCreate(cmd.Context(), o, c, req)
			}
			cf, err := c.CreateChangefeed(cmd.Context(), req)
			if err != nil {
				return err
			}
			return o.render(cf, func(tw tableWriter) {
				fmt.Fprintf(tw, "Changefeed %s created: %d partitions, maintainer %s.\n", cf.ID, cf.Partitions, orNone(cf.Maintainer))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Source, "source", "", "source URI: gen://?tables=8&keys=10000&rate=2000&ddl_every=30s&seed=1")
	f.StringVar(&req.Sink, "sink", "", "sink URI: file:///dir, s3://bucket/prefix, gs://bucket/prefix, azblob://container/prefix, mem://, kafka://host:port/topic, blackhole://")
	f.StringVar(&sourceFile, "source-file", "", "read the source URI from FILE (- for standard input), keeping its password off the command line")
	f.StringVar(&sinkFile, "sink-file", "", "read the sink URI from FILE (- for standard input), keeping its credentials off the command line")
	_ = cmd.MarkFlagFilename("source-file")
	_ = cmd.MarkFlagFilename("sink-file")
	f.IntVar(&req.PartitionsPerTable, "partitions-per-table", 4, "key ranges each table is cut into")
	f.StringVar(&snapshot, "snapshot", "", "database sources: initial (copy the existing rows first; the default) or never (only changes from now on)")
	f.BoolVar(&dryRun, "dry-run", false, "say which tables it would replicate and which it refuses, and why; create nothing (exit 2, or 1 when a table is refused)")
	_ = cmd.RegisterFlagCompletionFunc("snapshot", cobra.FixedCompletions([]string{"initial\tcopy the existing rows first", "never\tonly changes from now on"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// previewCreate shows what a create would replicate.
func previewCreate(ctx context.Context, o *options, c *api.Client, req api.ChangefeedCreateRequest) error {
	p, err := c.PreviewChangefeed(ctx, req)
	if err != nil {
		return err
	}
	if err := o.render(p, func(tw tableWriter) {
		fmt.Fprintf(tw, "Changefeed %s would replicate %d %s:\n", req.ID, len(p.Tables), plural(len(p.Tables), "table", "tables"))
		for _, t := range p.Tables {
			fmt.Fprintf(tw, "  %s\n", t)
		}
		if len(p.Refused) > 0 {
			fmt.Fprintf(tw, "Refused:\n")
			for _, r := range p.Refused {
				fmt.Fprintf(tw, "  %s\n", r)
			}
		}
	}); err != nil {
		return err
	}
	if len(p.Refused) > 0 {
		return withExit(ExitError, fmt.Errorf("the create would be refused: %d %s cannot be replicated", len(p.Refused), plural(len(p.Refused), "table", "tables")))
	}
	if len(p.Tables) == 0 {
		return withExit(ExitError, errors.New("the create would be refused: it names no table"))
	}
	return withExit(ExitDryRunChanges, errors.New("the changefeed would be created"))
}

// withSnapshot puts --snapshot into a database source's URI, where the
// source reads it (snapshot=).
func withSnapshot(source, mode string) (string, error) {
	if mode != "initial" && mode != "never" {
		return "", fmt.Errorf("--snapshot %q: use initial or never", mode)
	}
	u, err := url.Parse(source)
	if err != nil || u.Scheme == "gen" || u.Scheme == "" {
		// The agent's source says what it makes of it: the CLI knows
		// only that the generator has nothing to copy.
		return "", fmt.Errorf("--snapshot applies to database sources (postgres://, mysql://); this source has nothing to copy")
	}
	q := u.Query()
	if have := q.Get("snapshot"); have != "" && have != mode {
		return "", fmt.Errorf("--snapshot %s contradicts snapshot=%s in the source URI; give one", mode, have)
	}
	q.Set("snapshot", mode)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func orNone(s string) string {
	if s == "" {
		return "(not placed yet)"
	}
	return s
}

// orDash is s, or "-" for an empty table cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newChangefeedListCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List changefeeds with their checkpoint and lag", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			list, err := c.Changefeeds(cmd.Context())
			if err != nil {
				return err
			}
			return o.render(list, func(tw tableWriter) {
				changefeedTable(tw, list.Changefeeds)
				// What removed changefeeds still hold upstream: a slot keeps
				// WAL on the database's disk until it is dropped.
				for _, pc := range list.PendingCleanups {
					if pc.Create {
						fmt.Fprintf(tw, "creating %s: not finished (since %s, %d release %s; %s); a create cut short is released by the coordinator\n",
							pc.Changefeed, pc.Since.UTC().Format(time.RFC3339), pc.Attempts, plural(pc.Attempts, "attempt", "attempts"), orDash(pc.LastError))
						continue
					}
					fmt.Fprintf(tw, "removed %s: its replication slot is not dropped yet (since %s, %d %s; %s); the coordinator retries\n",
						pc.Changefeed, pc.Since.UTC().Format(time.RFC3339), pc.Attempts, plural(pc.Attempts, "attempt", "attempts"), orDash(pc.LastError))
				}
			})
		},
	}
}

func newChangefeedGetCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "get NAME", Short: "Show one changefeed", Args: exactArgs(1, "the changefeed's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			cf, err := c.Changefeed(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			// How many tables the partitions cover: the count asked per
			// table at creation is a starting point (an empty table is one
			// partition; splits add more).
			tables := 0
			if o.output() == formatTable || o.output() == formatWide {
				if parts, err := c.Partitions(cmd.Context(), cf.ID, ""); err == nil {
					seen := map[string]bool{}
					for _, p := range parts.Partitions {
						seen[p.Table] = true
					}
					tables = len(seen)
				}
			}
			return o.render(cf, func(tw tableWriter) {
				fmt.Fprintf(tw, "ID:\t%s\nState:\t%s\n", cf.ID, cf.State)
				fmt.Fprintf(tw, "Checkpoint:\t%d (%s, lag %s)\n", cf.CheckpointTs, model.Ts(cf.CheckpointTs).Time().Format(time.RFC3339Nano), time.Duration(cf.CheckpointLagMs)*time.Millisecond)
				fmt.Fprintf(tw, "Maintainer:\t%s (epoch %d)\n", orNone(cf.Maintainer), cf.MaintainerEpoch)
				if tables > 0 {
					fmt.Fprintf(tw, "Partitions:\t%d in %d %s (created with %d per table)\n", cf.Partitions, tables, plural(tables, "table", "tables"), cf.PartitionsPerTable)
				} else {
					fmt.Fprintf(tw, "Partitions:\t%d (created with %d per table)\n", cf.Partitions, cf.PartitionsPerTable)
				}
				created := cf.CreatedAt.Format(time.RFC3339)
				if cf.CreatedBy != "" {
					created += " by " + cf.CreatedBy
				}
				fmt.Fprintf(tw, "Source:\t%s\nSink:\t%s\nCreated:\t%s\n", cf.Source, cf.Sink, created)
				if cf.Error != "" {
					fmt.Fprintf(tw, "Error:\t%s\n", cf.Error)
				}
				var issues []string
				for _, ti := range cf.TableIssues {
					issues = append(issues, ti.Line())
				}
				labelled(tw, "Tables:", issues)
				if r := cf.Refollow; r != nil && r.TakenOver != "" && cf.State == string(model.ChangefeedPaused) {
					fmt.Fprintf(tw, "Changing:\tthe coordinator's change of its tables (by %s) was taken over by %s; it stays paused until resumed: cdcctl changefeed resume %s\n", r.By, r.TakenOver, cf.ID)
				} else if r.Active() && len(r.Steps) > 0 {
					fmt.Fprintf(tw, "Changing:\tpaused by the coordinator since %s to change its tables (by %s) to %s: %d of %d %s made; it resumes it once done\n",
						r.Since.Format(time.RFC3339), r.By, strings.Join(r.Steps[len(r.Steps)-1], ", "), r.Done, len(r.Steps), plural(len(r.Steps), "step", "steps"))
				}
				if ss := cf.SourceStatus; ss != nil {
					switch {
					case ss.Error != "":
						fmt.Fprintf(tw, "Upstream:\tcannot inspect: %s\n", ss.Error)
						if ss.Kind == "mysql" && ss.Position != "" {
							fmt.Fprintf(tw, "Binlog:\tresumes at %s\n", ss.Position)
						}
					case ss.Kind == "mysql":
						// A binary log is kept by time, not for a reader:
						// what matters is where the changefeed resumes and
						// how much log the server still has from there.
						if ss.Purged {
							fmt.Fprintf(tw, "Binlog:\tresumes at %s, which the server no longer has (purged): copy the tables again (cdcctl changefeed resnapshot %s) or remove the changefeed\n", orNone(ss.Position), cf.ID)
						} else {
							fmt.Fprintf(tw, "Binlog:\tresumes at %s, the server keeps %s of binary log from there\n", orNone(ss.Position), humanBytes(ss.RetainedBytes))
						}
						if ss.RetentionSeconds > 0 && !ss.Purged {
							// The server purges by age: the changefeed's lag
							// eats into that.
							kept := time.Duration(ss.RetentionSeconds) * time.Second
							headroom := kept - time.Duration(cf.CheckpointLagMs)*time.Millisecond
							if headroom > 0 {
								fmt.Fprintf(tw, "Retention:\tbinary logs are kept %s; at the current lag the changefeed has %s before its position is purged\n", kept, headroom.Round(time.Second))
							} else {
								fmt.Fprintf(tw, "Retention:\tbinary logs are kept %s, less than the changefeed's lag: its position is purged or about to be; keep binary logs longer (binlog_expire_logs_seconds)\n", kept)
							}
						}
					default:
						active := "idle (no reader streams from it)"
						if ss.Active {
							active = "streaming"
						}
						fmt.Fprintf(tw, "Slot:\t%s, %s, confirmed %s, retaining %s of WAL\n", ss.Slot, active, orNone(ss.Position), humanBytes(ss.RetainedBytes))
						if ss.SafeBytes != nil {
							fmt.Fprintf(tw, "WAL limit:\t%s more before PostgreSQL gives the slot up (max_slot_wal_keep_size; wal_status %s)\n", humanBytes(*ss.SafeBytes), ss.WALStatus)
						}
					}
					if ss.Snapshot != "" {
						fmt.Fprintf(tw, "Snapshot:\t%s\n", ss.Snapshot)
					}
					if ss.Filter != "" {
						fmt.Fprintf(tw, "Table rules:\t%s (followed every 30 s by default)\n", ss.Filter)
					}
					labelled(tw, "Not replicated:", ss.Unreplicated)
					labelled(tw, "Warnings:", ss.Warnings)
				}
				var incidents []string
				for _, in := range cf.Incidents {
					incidents = append(incidents, incidentLine(in))
				}
				labelled(tw, "Incidents:", incidents)
			})
		},
	}
}

func newChangefeedStateCommand(o *options, verb string) *cobra.Command {
	short := "Pause a changefeed: dispatchers stop gracefully, the checkpoint stays exact"
	if verb == "resume" {
		short = "Resume a paused changefeed from its checkpoint (a running one with held tables: read them again)"
	}
	var tables []string
	cmd := &cobra.Command{
		Use: verb + " NAME", Short: short, Args: exactArgs(1, "the changefeed's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			var named []string
			schema := "public"
			if len(tables) > 0 {
				// Names without a schema are in the source's default one.
				now, err := c.Changefeed(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				schema = defaultSchema(now.Source)
			}
			for _, t := range splitLists(tables) {
				q, err := qualifyTable(t, schema)
				if err != nil {
					return usageErr(fmt.Errorf("--table: %w", err))
				}
				named = append(named, q)
			}
			var cf *api.ChangefeedResponse
			if verb == "resume" {
				cf, err = c.ResumeChangefeed(cmd.Context(), args[0], named...)
			} else {
				cf, err = c.PauseChangefeed(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			return o.render(cf, func(tw tableWriter) {
				fmt.Fprintf(tw, "Changefeed %s is %s.\n", cf.ID, cf.State)
				if len(named) > 0 {
					fmt.Fprintf(tw, "Read again: %s; tables still held: %d.\n", strings.Join(named, ", "), heldCount(cf.TableIssues))
				}
			})
		},
	}
	if verb == "resume" {
		cmd.Use = "resume NAME [--table T]"
		cmd.Long = `Resume a paused changefeed from its checkpoint. A running changefeed with
held tables (changefeed get lists them, with why) reads them again from
where they stopped: all of them, or with --table only those named, the
others staying held. A table whose cause is still there is held again at
once.`
		cmd.Flags().StringArrayVar(&tables, "table", nil, `a held table to read again (repeatable; public."Orders" for a name with capitals); the others stay held`)
	}
	return cmd
}

// heldCount counts the held tables among a changefeed's issues.
func heldCount(issues []model.TableIssue) int {
	n := 0
	for _, i := range issues {
		if i.State == model.TableHeld {
			n++
		}
	}
	return n
}

func newChangefeedRemoveCommand(o *options) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use: "remove NAME [--yes]", Aliases: []string{"rm"}, Short: "Remove a changefeed (its sink's data stays; a database source's slot and publication are dropped)", Args: exactArgs(1, "the changefeed's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if !yes {
				// Like every destructive command: asked on a terminal,
				// --yes in scripts. What goes is named first.
				if !isTerminal(o.in) {
					return withExit(ExitError, fmt.Errorf("refusing to remove changefeed %s without --yes: stdin is not a terminal; run again with --yes", args[0]))
				}
				cf, err := c.Changefeed(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(o.out, "Changefeed %s: %s into %s, %d partitions, lag %s.\n", cf.ID, cf.Source, cf.Sink, cf.Partitions, time.Duration(cf.CheckpointLagMs)*time.Millisecond)
				if cf.SourceStatus != nil && cf.SourceStatus.Slot != "" {
					fmt.Fprintf(o.out, "Its replication slot %s is dropped: a changefeed created again starts from scratch.\n", cf.SourceStatus.Slot)
				}
				fmt.Fprintf(o.errOut, "Remove it (the sink's data stays)? [y/N] ")
				answer, _ := bufio.NewReader(o.in).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return withExit(ExitCancelled, fmt.Errorf("remove changefeed %s: not approved; nothing changed", args[0]))
				}
			}
			out, err := c.RemoveChangefeed(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.render(out, func(tw tableWriter) {
				fmt.Fprintf(tw, "Changefeed %s removed.\n", args[0])
				if out.CleanupPending {
					fmt.Fprintf(tw, "Its replication slot and publication are not dropped yet (%s); the coordinator retries until the database can be reached. Until then the slot holds WAL on the database's disk.\n", out.CleanupError)
				}
			})
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "remove without asking (scripts)")
	return cmd
}

// humanBytes is a byte count for people: 1.5 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// incidentLine is one recovery, restart or failure of a changefeed.
func incidentLine(in model.Incident) string {
	var what string
	switch in.Kind {
	case "recovered":
		what = fmt.Sprintf("dispatcher of %s on %s recovered", in.Partition, in.Node)
	case "restart":
		what = fmt.Sprintf("restarted on %s (%s)", in.Node, in.Reason)
	case "failed":
		if in.Partition == "" {
			// The changefeed's reader: its reason is why it failed.
			what = fmt.Sprintf("failed on %s: %s", in.Node, in.Reason)
			break
		}
		what = fmt.Sprintf("failed: partition %s on %s", in.Partition, in.Node)
	default:
		what = in.Kind
		if in.Reason != "" {
			what += " " + in.Reason // paused by alice, resumed by its table rules
		}
	}
	if in.Err != "" {
		what += ": " + in.Err
	}
	return in.Time.Format(time.RFC3339) + "  " + what
}

// plural picks a noun's form for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
