package plan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// NodeDiff is one capture before and after a plan.
type NodeDiff struct {
	Node              model.NodeID `json:"node"`
	LivenessBefore    string       `json:"liveness_before"`
	LivenessAfter     string       `json:"liveness_after"`
	MaintainersBefore int          `json:"maintainers_before"`
	MaintainersAfter  int          `json:"maintainers_after"`
	PartitionsBefore  int          `json:"partitions_before"`
	PartitionsAfter   int          `json:"partitions_after"`
}

// Diff computes every capture's counts before and after the plan, in
// snapshot order.
func Diff(s *model.Snapshot, p *Plan) []NodeDiff {
	idx := map[model.NodeID]int{}
	out := make([]NodeDiff, len(s.Nodes))
	for i, n := range s.Nodes {
		idx[n.Info.ID] = i
		out[i] = NodeDiff{Node: n.Info.ID, LivenessBefore: n.Liveness.String(), LivenessAfter: n.Liveness.String()}
	}
	for _, cf := range s.Changefeeds {
		if i, ok := idx[cf.Maintainer.Node]; ok {
			out[i].MaintainersBefore++
			out[i].MaintainersAfter++
		}
	}
	for _, ps := range s.Partitions {
		if i, ok := idx[ps.Route.Node]; ok {
			out[i].PartitionsBefore++
			out[i].PartitionsAfter++
		}
	}
	for _, b := range p.Batches {
		for _, st := range b.Steps {
			from, fok := idx[st.From]
			to, tok := idx[st.To]
			switch st.Kind {
			case StepMoveMaintainer:
				if fok && tok {
					out[from].MaintainersAfter--
					out[to].MaintainersAfter++
				}
			case StepMovePartition:
				if fok && tok {
					out[from].PartitionsAfter--
					out[to].PartitionsAfter++
				}
			case StepSetLiveness:
				if tok {
					out[to].LivenessAfter = st.Liveness
				}
			}
		}
	}
	return out
}

func change(before, after int) string {
	if before == after {
		return fmt.Sprintf("%d", after)
	}
	return fmt.Sprintf("%d → %d (%+d)", before, after, after-before)
}

// Render writes a plan for people: a summary, the per-capture table with
// its changes, and the batches.
func Render(w io.Writer, s *model.Snapshot, p *Plan) error {
	pred := time.Duration(p.PredictedMillis) * time.Millisecond
	fmt.Fprintf(w, "Plan: %s %s (batches of at most %d maintainers)\n", p.Kind, p.Target, p.BatchSize)
	fmt.Fprintf(w, "  %d maintainers and %d partitions move; %d batches; predicted %s\n\n",
		p.Steps(StepMoveMaintainer), p.Steps(StepMovePartition), len(p.Batches), pred.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CAPTURE\tLIVENESS\tMAINTAINERS\tPARTITIONS")
	for _, d := range Diff(s, p) {
		live := d.LivenessAfter
		if d.LivenessBefore != d.LivenessAfter {
			live = d.LivenessBefore + " → " + d.LivenessAfter
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Node, live, change(d.MaintainersBefore, d.MaintainersAfter), change(d.PartitionsBefore, d.PartitionsAfter))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nBatches:")
	for i, b := range p.Batches {
		var parts []string
		for _, st := range b.Steps {
			switch st.Kind {
			case StepSetLiveness:
				parts = append(parts, fmt.Sprintf("%s → %s", st.To, st.Liveness))
			case StepMoveMaintainer:
				parts = append(parts, fmt.Sprintf("maintainer %s %s → %s", st.Changefeed, st.From, st.To))
			case StepMovePartition:
				parts = append(parts, fmt.Sprintf("partition %s/%s (%s) %s → %s", st.Changefeed, st.Partition, st.Table, st.From, st.To))
			}
		}
		fmt.Fprintf(w, "  %2d. %s\n", i+1, strings.Join(parts, "; "))
	}
	return nil
}
