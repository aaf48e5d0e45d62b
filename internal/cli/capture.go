package cli

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

func newCaptureCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "capture", Aliases: []string{"captures", "node"}, Short: "Captures: the cdc-agent nodes of the cluster"}
	cmd.AddCommand(newCaptureListCommand(o), newCaptureGetCommand(o))
	return cmd
}

func newCaptureListCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the captures with their liveness; * marks the coordinator",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			list, err := c.Captures(cmd.Context())
			if err != nil {
				return err
			}
			now := o.now()
			return o.render(list, func(tw tableWriter) {
				if tw.wide {
					tw.header("ID\tADDRESS\tLIVENESS\tCOORDINATOR\tPID\tUPTIME\tVERSION\tSTARTED")
				} else {
					tw.header("ID\tADDRESS\tLIVENESS\tCOORDINATOR\tPID\tUPTIME\tVERSION")
				}
				for _, cp := range list.Captures {
					mark := ""
					if cp.Coordinator {
						mark = "*"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s", cp.ID, cp.Address, cp.Liveness, mark, cp.PID, age(now, cp.StartedAt), cp.AgentVersion)
					if tw.wide {
						fmt.Fprintf(tw, "\t%s", cp.StartedAt.UTC().Format(time.RFC3339))
					}
					fmt.Fprintln(tw)
				}
			})
		},
	}
}

func newCaptureGetCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:               "get CAPTURE",
		Short:             "Show one capture",
		Args:              exactArgs(1, "the capture id, e.g. capture-2 (see 'cdcctl capture list')"),
		ValidArgsFunction: firstArg(completeCaptures(o)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			cp, err := c.Capture(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.render(cp, func(tw tableWriter) {
				fmt.Fprintf(tw, "ID:\t%s\n", cp.ID)
				fmt.Fprintf(tw, "Address:\t%s\n", cp.Address)
				fmt.Fprintf(tw, "Liveness:\t%s\n", cp.Liveness)
				fmt.Fprintf(tw, "Coordinator:\t%t\n", cp.Coordinator)
				fmt.Fprintf(tw, "PID:\t%d\n", cp.PID)
				fmt.Fprintf(tw, "Started:\t%s (%s ago)\n", cp.StartedAt.Format("2006-01-02 15:04:05Z07:00"), age(o.now(), cp.StartedAt))
				fmt.Fprintf(tw, "Agent version:\t%s\n", cp.AgentVersion)
				fmt.Fprintf(tw, "Features:\t%s\n", cmp.Or(strings.Join(cp.Features, ", "), "none (a version before features were registered)"))
			})
		},
	}
}

// exactArgs is cobra.ExactArgs with an error that says what is expected.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr(fmt.Errorf("%s takes %d argument(s), got %d: %s", cmd.CommandPath(), n, len(args), what))
		}
		return nil
	}
}

// completeCaptures completes capture ids from the cluster, quietly giving
// nothing when no agent answers.
func completeCaptures(o *options) cobra.CompletionFunc {
	return completeCapturesIf(o, func(api.Capture) bool { return true })
}

// completeDrainable completes the captures a drain would take: not the
// coordinator, and Alive (or Draining, from a drain to finish), not the
// ones it refuses.
func completeDrainable(o *options) cobra.CompletionFunc {
	return completeCapturesIf(o, func(cp api.Capture) bool {
		return !cp.Coordinator && (cp.Liveness == model.LivenessAlive.String() || cp.Liveness == model.LivenessDraining.String())
	})
}

// completeCapturesIf completes the ids of the captures that keep says.
func completeCapturesIf(o *options, keep func(api.Capture) bool) cobra.CompletionFunc {
	return completeFrom(o, func(ctx context.Context, c *api.Client) ([]string, error) {
		list, err := c.Captures(ctx)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, cp := range list.Captures {
			if keep(cp) {
				out = append(out, cp.ID+"\t"+describeCapture(cp))
			}
		}
		return out, nil
	})
}

// firstArg completes only a command's first argument.
func firstArg(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd, args, prefix)
	}
}

// completeFrom completes from what list returns ("value\tdescription"),
// asked of the cluster with a short timeout; it gives nothing, quietly,
// when no agent answers.
func completeFrom(o *options, list func(context.Context, *api.Client) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if o.loadConfig(cmd.Root().PersistentFlags()) != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := o.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), shortTimeout/5)
		defer cancel()
		all, err := list(ctx, c)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, v := range all {
			if strings.HasPrefix(v, prefix) {
				out = append(out, v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func describeCapture(cp api.Capture) string {
	d := cp.Liveness + " " + cp.Address
	if cp.Coordinator {
		d += " coordinator"
	}
	return d
}
