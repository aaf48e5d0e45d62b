package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cdcctl/cdcctl/internal/api"
)

// completeArgsAndFlags gives every command that takes a changefeed, a
// plan, a capture or a partition completion of it from the cluster: the
// first argument by the word its usage names (get NAME under changefeed,
// watch ID under plan, ...), and the --changefeed, --node, --to flags
// wherever they are. Commands that set their own keep it.
func completeArgsAndFlags(o *options, cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		completeArgsAndFlags(o, sub)
	}
	for flag, f := range map[string]cobra.CompletionFunc{
		"changefeed": completeChangefeeds(o),
		"node":       completeCaptures(o),
		"to":         completeCaptures(o),
	} {
		if cmd.LocalFlags().Lookup(flag) == nil {
			continue
		}
		if _, set := cmd.GetFlagCompletionFunc(flag); !set {
			_ = cmd.RegisterFlagCompletionFunc(flag, f)
		}
	}
	if cmd.ValidArgsFunction != nil || !cmd.HasParent() {
		return
	}
	fields := strings.Fields(cmd.Use)
	if len(fields) < 2 {
		return
	}
	switch group, arg := cmd.Parent().Name(), fields[1]; {
	case group == "changefeed" && arg == "NAME":
		cmd.ValidArgsFunction = firstArg(completeChangefeeds(o))
	case group == "plan" && arg == "ID|FILE":
		cmd.ValidArgsFunction = firstArg(orFiles(completePlans(o)))
	case group == "plan" && strings.HasPrefix(arg, "ID"):
		cmd.ValidArgsFunction = firstArg(completePlans(o))
	case arg == "CAPTURE":
		cmd.ValidArgsFunction = firstArg(completeCaptures(o))
	case arg == "PARTITION":
		cmd.ValidArgsFunction = firstArg(completePartitions(o))
	}
}

// completeChangefeeds completes changefeed names from the cluster.
func completeChangefeeds(o *options) cobra.CompletionFunc {
	return completeFrom(o, func(ctx context.Context, c *api.Client) ([]string, error) {
		list, err := c.Changefeeds(ctx)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, cf := range list.Changefeeds {
			out = append(out, fmt.Sprintf("%s\t%s, %d partitions, into %s", cf.ID, cf.State, cf.Partitions, cf.Sink))
		}
		return out, nil
	})
}

// completePlans completes plan ids from the cluster, newest first as the
// list gives them.
func completePlans(o *options) cobra.CompletionFunc {
	return completeFrom(o, func(ctx context.Context, c *api.Client) ([]string, error) {
		list, err := c.Plans(ctx)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, p := range list.Plans {
			out = append(out, fmt.Sprintf("%s\t%s %s, %s", p.ID, p.Kind, p.Target, p.State))
		}
		return out, nil
	})
}

// orFiles offers f's values and lets the shell complete file names too,
// for an argument that is an id or a file (plan show ID|FILE).
func orFiles(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		out, _ := f(cmd, args, prefix)
		return out, cobra.ShellCompDirectiveDefault
	}
}
