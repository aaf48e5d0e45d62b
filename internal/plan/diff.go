package plan

import (
	"fmt"
	"io"
	"sort"
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
			case StepSplitPartition:
				if tok {
					out[to].PartitionsAfter++
				}
			case StepMovePartitions:
				for node, n := range st.Spread {
					if i, ok := idx[node]; ok && fok {
						out[from].PartitionsAfter -= n
						out[i].PartitionsAfter += n
					}
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
	switch p.Kind {
	case KindDrain:
		fmt.Fprintf(w, "Plan: %s %s (batches of at most %d maintainers)\n", p.Kind, p.Target, p.BatchSize)
		fmt.Fprintf(w, "  %d maintainers and %d partitions move; %d batches; predicted %s\n\n",
			p.Steps(StepMoveMaintainer), p.PartitionMoves(), len(p.Batches), pred.Round(time.Millisecond))
	default:
		fmt.Fprintf(w, "Plan: %s %s (batches of at most %d steps)\n", p.Kind, p.Target, p.BatchSize)
		fmt.Fprintf(w, "  %d partitions move, %d split; %d batches; predicted %s\n\n",
			p.PartitionMoves(), p.Steps(StepSplitPartition), len(p.Batches), pred.Round(time.Millisecond))
	}
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
		if len(b.Steps) > 1 && b.Steps[0].Kind == StepMovePartitions {
			fmt.Fprintf(w, "  %2d. partitions of %d changefeeds, at once:\n", i+1, len(b.Steps))
			for _, st := range b.Steps {
				fmt.Fprintf(w, "        %s\n", StepText(st))
			}
			continue
		}
		var parts []string
		for _, st := range b.Steps {
			parts = append(parts, StepText(st))
		}
		fmt.Fprintf(w, "  %2d. %s\n", i+1, strings.Join(parts, "; "))
	}
	return nil
}

// StepText says what a step does, in one line.
func StepText(st Step) string {
	switch st.Kind {
	case StepSetLiveness:
		return fmt.Sprintf("%s → %s", st.To, st.Liveness)
	case StepMoveMaintainer:
		return fmt.Sprintf("maintainer %s %s → %s", st.Changefeed, st.From, st.To)
	case StepMovePartition:
		return fmt.Sprintf("partition %s/%s (%s) %s → %s", st.Changefeed, st.Partition, st.Table, st.From, st.To)
	case StepSplitPartition:
		key := st.Key
		if st.KeyText != "" {
			key = st.KeyText
		}
		return fmt.Sprintf("split partition %s/%s (%s) at %q on %s", st.Changefeed, st.Partition, st.Table, key, st.From)
	case StepMovePartitions:
		nodes := make([]string, 0, len(st.Spread))
		for n := range st.Spread {
			nodes = append(nodes, string(n))
		}
		sort.Strings(nodes)
		var to []string
		for _, n := range nodes {
			to = append(to, fmt.Sprintf("%s ×%d", n, st.Spread[model.NodeID(n)]))
		}
		return fmt.Sprintf("%d partitions of %s %s → %s", st.Count, st.Changefeed, st.From, strings.Join(to, ", "))
	}
	return string(st.Kind)
}
