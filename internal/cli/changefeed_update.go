package cli

import (
	"bufio"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

// changefeed update changes a paused changefeed's tables or sink
// options: the change is computed by the coordinator and shown first (a
// dry run), approved on a terminal or with --yes, then written.
func newChangefeedUpdateCommand(o *options) *cobra.Command {
	var (
		tables, add, remove, again, sinkOpts []string
		sourceURI, sourceFile, sinkOptFile   string
		dryRun, yes                          bool
	)
	cmd := &cobra.Command{
		Use:   "update NAME (--add-table T | --remove-table T | --tables T1,T2 | --copy-table T | --sink-option K=V | --sink-option-file FILE | --source URI | --source-file FILE) [--dry-run] [--yes]",
		Short: "Change a paused changefeed's tables (added ones snapshotted, removed ones end), its sink's options or its source's connection",
		Long: `Change the tables a paused database changefeed replicates, or how its
sink writes. Added tables begin at the changefeed's checkpoint: when it
resumes, their existing rows are copied (their own initial snapshot)
while their changes stream. Removed tables' partitions end where the
changefeed was paused; the sink keeps what it holds of them, and the
publication stops sending them. A table removed before can be added
back: the sink gets a TRUNCATE of it first, then its rows again.
--copy-table T does both in one update for a table the changefeed keeps
(also its only table): its partitions are replaced by new ones cut on
its primary key now, and when the changefeed resumes the sink gets a
TRUNCATE of it and its rows copied again, its changes from the
checkpoint on streamed after them. It is the remedy of a table held for
a change a new copy undoes, or whose copy went wrong.

--sink-option K=V changes one parameter of the sink URI (K= puts back
its default): how the sink writes (storage: file-size, flush-interval,
max-flush-delay, fsync, write-timeout, retry-timeout, state-ttl,
spool-max-bytes, max-active-tables, max-buffered-bytes; Kafka: timeouts,
buffer-memory, max-message-bytes, connections-per-broker and the SASL/TLS credentials), never
where nor in which form (the location, protocol, partitioning): a sink
holding rows written two ways is refused; create a new changefeed for
that. Kafka's hash-partitions=N pins a changefeed created before the pin
to the N partitions its keys hash over (the topic's count before
partitions were added: nothing moves); docs/cli.md says what another
count does. Every node opens the sink again when the changefeed resumes.
--sink-option-file FILE reads K=V lines from a file (- for standard
input, with --yes or --dry-run; # starts a comment), keeping a
credential such as sasl-password off the command line.

--source URI gives the changefeed its source's connection anew, in a
URI as for create: the user, the password (a rotated one), the address
(a primary's after a failover) and the driver's connection parameters
(PostgreSQL's sslmode, connect_timeout, ...); --source-file FILE reads
that URI from a file (- for standard input, with --yes or --dry-run),
keeping the password off the command line. What it replicates stays:
the database, the tables (leave tables= out), the slot or server id, the
snapshot, PostgreSQL's session settings, its position. A password
written xxxxx, as 'changefeed get' shows it, keeps the one it has; none
leaves it to the agents' environment (PGPASSWORD, MYSQL_PWD:
docs/security.md). The new connection is tried before anything is
written: the login, and the changefeed's position there (PostgreSQL:
its slot; MySQL: the binary log from its position, by GTID on another
server of its replication topology). Readers connect with it when the
changefeed resumes.

Pause the changefeed first (cdcctl changefeed pause NAME); resume it
after the update. --dry-run shows the change and exits 2 (0 when there is
none).`,
		Example: `  cdcctl changefeed pause shop
  cdcctl changefeed update shop --add-table public.invoices --dry-run
  cdcctl changefeed update shop --add-table public.invoices --remove-table public.audit --yes
  cdcctl changefeed update shop --copy-table public.orders --yes
  cdcctl changefeed update shop --sink-option flush-interval=1s --sink-option file-size= --yes
  cdcctl changefeed update shop --source 'postgres://cdc:NEW-PASSWORD@db2:5432/shop?sslmode=require' --yes
  cdcctl changefeed resume shop`,
		Args: exactArgs(1, "the changefeed's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if isStdin(sourceFile) && isStdin(sinkOptFile) {
				return errTwoStdin
			}
			for flag, path := range map[string]string{"source-file": sourceFile, "sink-option-file": sinkOptFile} {
				if isStdin(path) && !yes && !dryRun {
					return usageErr(fmt.Errorf("--%s - reads from standard input, where the update's approval would be asked too: add --yes (or --dry-run to see the change)", flag))
				}
			}
			var err error
			if sourceURI, err = o.uriFlag("source", sourceURI, sourceFile); err != nil {
				return err
			}
			if sinkOptFile != "" {
				lines, err := o.sinkOptionsFile(sinkOptFile)
				if err != nil {
					return err
				}
				sinkOpts = append(sinkOpts, lines...)
			}
			if len(tables) > 0 && len(add)+len(remove) > 0 {
				return usageErr(errors.New("give --tables (the whole list), or --add-table/--remove-table, not both"))
			}
			if sourceURI != "" && len(tables)+len(add)+len(remove)+len(again) > 0 {
				return usageErr(errors.New("change the source's connection (--source) in an update of its own, then its tables: an update of the tables reaches the source through the connection the changefeed has"))
			}
			opts, err := parseSinkOptions(sinkOpts, sinkOptFile != "")
			if err != nil {
				return usageErr(err)
			}
			if len(tables)+len(add)+len(remove)+len(again)+len(opts) == 0 && sourceURI == "" {
				return usageErr(errors.New("name the change: --add-table T, --remove-table T, --tables T1,T2 (the whole list), --copy-table T, --sink-option K=V (or --sink-option-file FILE), or --source URI (its connection; or --source-file FILE)"))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			cf, err := c.Changefeed(cmd.Context(), id)
			if err != nil {
				return err
			}
			current := sourceTables(cf.Source)
			var next []string
			if len(tables)+len(add)+len(remove) > 0 {
				if next, err = nextTables(current, tables, add, remove, defaultSchema(cf.Source)); err != nil {
					return usageErr(err)
				}
				if len(next) == 0 {
					// (Sent, an empty list is no list: the update would
					// change only the sink's options, or be refused as
					// naming nothing.)
					return usageErr(fmt.Errorf("a changefeed needs at least one table, and this update leaves %s none; to stop replicating all of them, remove the changefeed: cdcctl changefeed remove %s", id, id))
				}
				if slices.Equal(next, current) && len(again) == 0 {
					if len(opts) == 0 {
						return o.render(&api.ChangefeedUpdateResponse{Version: api.SchemaVersion, Changefeed: id, DryRun: dryRun, Tables: current}, func(tw tableWriter) {
							fmt.Fprintf(tw, "Changefeed %s replicates exactly these tables already (%s); nothing to change.\n", id, strings.Join(current, ", "))
						})
					}
					next = nil // the sink's options only
				}
			}
			copies, err := copyTables(again, next, current, defaultSchema(cf.Source))
			if err != nil {
				return usageErr(err)
			}
			if len(copies) > 0 && next == nil {
				next = current
			}
			req := api.ChangefeedUpdateRequest{Tables: next, SinkOptions: opts, CopyAgain: copies, Source: sourceURI}
			preview, err := c.UpdateChangefeed(cmd.Context(), id, withDryRun(req, true))
			if err != nil {
				return err
			}
			if next == nil && len(preview.SinkChanges)+len(preview.SourceChanges) == 0 {
				// Options and a connection it has already: done, nothing
				// to write (exit 0).
				return o.render(preview, func(tw tableWriter) {
					fmt.Fprintf(tw, "Changefeed %s's %s already; nothing to change.\n", id, alreadyWhat(len(opts) > 0, sourceURI != ""))
				})
			}
			if dryRun {
				if err := o.render(preview, func(tw tableWriter) { updateText(tw, preview) }); err != nil {
					return err
				}
				return withExit(ExitDryRunChanges, errors.New("the update has changes"))
			}
			if !yes {
				if !isTerminal(o.in) {
					return withExit(ExitError, fmt.Errorf("refusing to update changefeed %s without --yes: stdin is not a terminal; review the change with --dry-run, then run again with --yes", id))
				}
				if err := o.render(preview, func(tw tableWriter) { updateText(tw, preview) }); err != nil {
					return err
				}
				fmt.Fprintf(o.errOut, "Apply this change? [y/N] ")
				answer, _ := bufio.NewReader(o.in).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return withExit(ExitCancelled, fmt.Errorf("update changefeed %s: not approved; nothing changed", id))
				}
			}
			out, err := c.UpdateChangefeed(cmd.Context(), id, req)
			if err != nil {
				return err
			}
			return o.render(out, func(tw tableWriter) {
				updateText(tw, out)
				fmt.Fprintf(tw, "Changefeed %s updated; resume it to go on: cdcctl changefeed resume %s\n", id, id)
			})
		},
	}
	f := cmd.Flags()
	// StringArray, not StringSlice: a quoted name ("Orders") is not CSV.
	f.StringArrayVar(&tables, "tables", nil, `every table the changefeed replicates from now on (schema.table, comma-separated; public."Orders" for a name with capitals), or its table rules (public.*,!public.audit)`)
	f.StringArrayVar(&add, "add-table", nil, "a table to add (repeatable, or comma-separated)")
	f.StringArrayVar(&remove, "remove-table", nil, "a table to stop replicating (repeatable, or comma-separated)")
	f.StringArrayVar(&again, "copy-table", nil, "a table the changefeed keeps, to copy again from its checkpoint (repeatable, or comma-separated)")
	f.StringArrayVar(&sinkOpts, "sink-option", nil, "change a sink URI parameter, K=V (K= for its default; repeatable): how the sink writes, not where nor in which form")
	f.StringVar(&sourceURI, "source", "", "a source URI whose connection the changefeed takes (user, password, address, driver parameters; password xxxxx keeps its own); what it replicates stays")
	f.StringVar(&sourceFile, "source-file", "", "read --source's URI from FILE (- for standard input), keeping its password off the command line")
	_ = cmd.MarkFlagFilename("source-file")
	f.StringVar(&sinkOptFile, "sink-option-file", "", "read --sink-option K=V lines from FILE (- for standard input), keeping a credential (sasl-password) off the command line")
	_ = cmd.MarkFlagFilename("sink-option-file")
	f.BoolVar(&dryRun, "dry-run", false, "show the change and exit 2 (0 if there is none); nothing is written")
	f.BoolVar(&yes, "yes", false, "apply without asking (scripts)")
	return cmd
}

// sourceTables are the tables= of a (redacted) source URI.
func sourceTables(source string) []string {
	u, err := url.Parse(source)
	if err != nil {
		return nil
	}
	return model.SplitTableList(u.Query().Get("tables"))
}

// defaultSchema is where a (redacted) source URI's tables named without
// a schema are, as the source reads them: a MySQL URI's database (its
// path), PostgreSQL's public.
func defaultSchema(source string) string {
	if u, err := url.Parse(source); err == nil && (u.Scheme == "mysql" || u.Scheme == "mariadb") {
		return strings.Trim(u.Path, "/")
	}
	return "public"
}

// nextTables is the table list an update asks for, in the current order
// with added tables last; names without a schema are in schema.
func nextTables(current, tables, add, remove []string, schema string) ([]string, error) {
	if len(tables) > 0 {
		var out []string
		for _, t := range splitLists(tables) {
			t, err := qualifyTable(t, schema)
			if err != nil {
				return nil, fmt.Errorf("--tables: %w", err)
			}
			out = append(out, t)
		}
		return out, nil
	}
	out := slices.Clone(current)
	for _, t := range splitLists(remove) {
		t, err := qualifyTable(t, schema)
		if err != nil {
			return nil, fmt.Errorf("--remove-table: %w", err)
		}
		i := slices.Index(out, t)
		if i < 0 {
			return nil, fmt.Errorf("--remove-table %s: the changefeed does not replicate it (it replicates %s)", t, strings.Join(current, ", "))
		}
		out = slices.Delete(out, i, i+1)
	}
	for _, t := range splitLists(add) {
		t, err := qualifyTable(t, schema)
		if err != nil {
			return nil, fmt.Errorf("--add-table: %w", err)
		}
		if slices.Contains(out, t) {
			return nil, fmt.Errorf("--add-table %s: the changefeed replicates it already", t)
		}
		out = append(out, t)
	}
	return out, nil
}

// partitionsOf counts the partitions of table among parts.
func partitionsOf(parts []api.Partition, table string) int {
	n := 0
	for _, p := range parts {
		if p.Table == table {
			n++
		}
	}
	return n
}

// copyTables are the --copy-table names, qualified: each must be one of
// the changefeed's tables before the update and after it (next; nil: the
// tables stay as they are).
func copyTables(again, next, current []string, schema string) ([]string, error) {
	var out []string
	for _, t := range splitLists(again) {
		t, err := qualifyTable(t, schema)
		if err != nil {
			return nil, fmt.Errorf("--copy-table: %w", err)
		}
		if !slices.Contains(current, t) || next != nil && !slices.Contains(next, t) {
			return nil, fmt.Errorf("--copy-table %s: only a table the changefeed replicates, and keeps, is copied again (it replicates %s); add a table with --add-table", t, strings.Join(current, ", "))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// parseSinkOptions reads --sink-option K=V values, and those of
// --sink-option-file (fromFile): a value is never shown, as it may be a
// password.
func parseSinkOptions(values []string, fromFile bool) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range values {
		k, val, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("--sink-option %q: write K=V (e.g. flush-interval=1s), or K= for the default", v)
		}
		if k != strings.TrimSpace(k) || val != strings.TrimLeft(val, " \t") {
			// Not trimmed: a value's spaces may be its own, and a
			// password taken with a space it lacks fails only at the
			// resume's login.
			return nil, fmt.Errorf("--sink-option %s: write K=V with no space around =", strings.TrimSpace(k))
		}
		if _, dup := out[k]; dup {
			where := "--sink-option"
			if fromFile {
				where = "--sink-option (and --sink-option-file)"
			}
			return nil, fmt.Errorf("%s %s is given twice", where, k)
		}
		out[k] = val
	}
	return out, nil
}

// updateText shows an update: each table added or removed with its
// partitions, the sink options changed, and the tables after it.
func updateText(tw tableWriter, u *api.ChangefeedUpdateResponse) {
	verb := "change"
	if u.DryRun {
		verb = "would change"
	}
	if len(u.SinkChanges) > 0 {
		fmt.Fprintf(tw, "Changefeed %s: sink options %s:\n", u.Changefeed, verb)
		for _, c := range u.SinkChanges {
			fmt.Fprintf(tw, "  %s\n", c)
		}
		fmt.Fprintf(tw, "Sink after: %s\n", u.Sink)
	}
	if len(u.SourceChanges) > 0 {
		fmt.Fprintf(tw, "Changefeed %s: source connection %s:\n", u.Changefeed, verb)
		for _, c := range u.SourceChanges {
			fmt.Fprintf(tw, "  %s\n", c)
		}
		fmt.Fprintf(tw, "Source after: %s\n", u.Source)
	}
	if len(u.Added)+len(u.Removed)+len(u.CopiedAgain) == 0 && len(u.SinkChanges)+len(u.SourceChanges) > 0 && len(u.Rules) == 0 {
		return // the connections only
	}
	fmt.Fprintf(tw, "Changefeed %s: tables %s at its checkpoint %s.\n", u.Changefeed, verb, model.Ts(u.At).Time().UTC().Format("2006-01-02 15:04:05.000"))
	for _, t := range u.Added {
		n := partitionsOf(u.AddedPartitions, t)
		fmt.Fprintf(tw, "  + %s\t%d %s, its existing rows copied when the changefeed resumes\n", t, n, plural(n, "partition", "partitions"))
	}
	for _, t := range u.Removed {
		fmt.Fprintf(tw, "  - %s\tits partitions end; the sink keeps what it has\n", t)
	}
	for _, t := range u.CopiedAgain {
		n := partitionsOf(u.AddedPartitions, t)
		fmt.Fprintf(tw, "  ~ %s\tcopied again: %d new %s; the sink's rows of it truncated, then copied when the changefeed resumes\n", t, n, plural(n, "partition", "partitions"))
	}
	for _, t := range u.Unpublished {
		if !slices.Contains(u.Removed, t) {
			fmt.Fprintf(tw, "  - %s\tleaves the changefeed's publication: not one of its tables (added there by hand, or renamed away from a table copied again)\n", t)
		}
	}
	fmt.Fprintf(tw, "Tables after: %s\n", strings.Join(u.Tables, ", "))
	if len(u.Rules) > 0 {
		fmt.Fprintf(tw, "Table rules: %s (tables that match later are added, tables dropped are removed, by themselves)\n", strings.Join(u.Rules, ","))
	}
}

// splitLists splits each flag value at its commas outside quotes.
func splitLists(values []string) []string {
	var out []string
	for _, v := range values {
		out = append(out, model.SplitTableList(v)...)
	}
	return out
}

// qualifyTable writes a table name as the changefeed names it
// (model.TableName), in the source's default schema when it has none, as
// the source does; a rule (public.*, !public.audit) is left to the source
// to read.
func qualifyTable(t, defaultSchema string) (string, error) {
	t = strings.TrimSpace(t)
	if strings.HasPrefix(t, "!") || strings.ContainsAny(t, "*?") {
		return t, nil
	}
	schema, table, err := model.ParseTableName(t)
	if err != nil {
		return "", err
	}
	if schema == "" {
		schema = defaultSchema
	}
	return model.TableName(schema, table), nil
}

// withDryRun is an update request as a dry run, or not.
func withDryRun(req api.ChangefeedUpdateRequest, dry bool) api.ChangefeedUpdateRequest {
	req.DryRun = dry
	return req
}

// alreadyWhat names what an update that changes nothing found in place.
func alreadyWhat(sink, source bool) string {
	switch {
	case sink && source:
		return "sink has these options and its source this connection"
	case source:
		return "source has this connection"
	}
	return "sink has these options"
}
