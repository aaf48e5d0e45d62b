package cli

import (
	"fmt"

	"github.com/cdcctl/cdcctl/internal/model"

	"github.com/spf13/cobra"
)

func newPartitionCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "partition", Aliases: []string{"partitions"}, Short: "Partitions: key ranges of tables and where they run"}
	var changefeed, node string
	list := &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List the routing table", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			ps, err := c.Partitions(cmd.Context(), changefeed, node)
			if err != nil {
				return err
			}
			return o.render(ps, func(tw tableWriter) {
				if tw.wide {
					tw.header("ID\tCHANGEFEED\tTABLE\tSTART\tEND\tNODE\tSTATUS\tEPOCH\tCHECKPOINT\tTARGET\tPINNED\tSNAPSHOT")
				} else {
					tw.header("ID\tCHANGEFEED\tTABLE\tSTART\tEND\tNODE\tSTATUS\tEPOCH")
				}
				for _, p := range ps.Partitions {
					end := p.End
					if end == "" {
						end = "∞"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%q\t%s\t%s\t%s\t%d", p.ID, p.Changefeed, p.Table, p.Start, end, orNone(p.Node), p.Status, p.Epoch)
					if tw.wide {
						cp := "-"
						if p.CheckpointTs != 0 {
							cp = model.Ts(p.CheckpointTs).Time().Format("15:04:05.000")
						}
						fmt.Fprintf(tw, "\t%s\t%s\t%t\t%s", cp, orDash(p.Target), p.Pinned, orDash(p.Snapshot))
					}
					fmt.Fprintln(tw)
				}
			})
		},
	}
	list.Flags().StringVar(&changefeed, "changefeed", "", "only this changefeed")
	list.Flags().StringVar(&node, "node", "", "only partitions on this capture")
	cmd.AddCommand(list, newPartitionGetCommand(o), newPartitionMoveCommand(o), newPartitionSplitCommand(o), newPartitionRebalanceCommand(o))
	return cmd
}
