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
	if p.Kind == KindRollout {
		// Each capture's work comes back to it once it has restarted:
		// what moves meanwhile is not where the plan leaves it.
		return out
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
// its changes, and the batches. With no snapshot (a saved plan gone
// stale) the table is left out: the plan's moves drawn on counts it did
// not read made impossible ones (a drained capture's below zero).
func Render(w io.Writer, s *model.Snapshot, p *Plan) error {
	pred := time.Duration(p.PredictedMillis) * time.Millisecond
	switch p.Kind {
	case KindDrain:
		fmt.Fprintf(w, "Plan: %s %s (batches of at most %s)\n", p.Kind, p.Target, counted(p.BatchSize, "maintainer"))
		fmt.Fprintf(w, "  %s and %s move; %s; predicted %s\n\n",
			counted(p.Steps(StepMoveMaintainer), "maintainer"), counted(p.PartitionMoves(), "partition"), counted(len(p.Batches), "batch"), pred.Round(time.Millisecond))
	case KindRollout:
		return renderRollout(w, s, p)
	default:
		fmt.Fprintf(w, "Plan: %s %s (batches of at most %s)\n", p.Kind, p.Target, counted(p.BatchSize, "step"))
		moves := counted(p.PartitionMoves(), "partition") + " move"
		if p.PartitionMoves() == 1 {
			moves += "s"
		}
		fmt.Fprintf(w, "  %s, %d split; %s; predicted %s\n\n",
			moves, p.Steps(StepSplitPartition), counted(len(p.Batches), "batch"), pred.Round(time.Millisecond))
	}
	if s == nil {
		fmt.Fprintln(w, staleCounts)
		renderBatches(w, p)
		return nil
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
	renderBatches(w, p)
	return nil
}

// renderBatches lists a plan's batches, one line each.
func renderBatches(w io.Writer, p *Plan) {
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
}

// renderRollout: the captures in the order they restart, what each
// holds now (it moves off and comes back), then the batches.
func renderRollout(w io.Writer, s *model.Snapshot, p *Plan) error {
	order := p.RolloutCaptures()
	pred := time.Duration(p.PredictedMillis) * time.Millisecond
	fmt.Fprintf(w, "Plan: rollout %s of %s, one at a time (each drained in batches of at most %s)\n", p.RolloutVerb(), counted(len(order), "capture"), counted(p.BatchSize, "maintainer"))
	fmt.Fprintf(w, "  %s and %s move off a capture and back; %s; predicted %s\n",
		counted(p.Steps(StepMoveMaintainer), "maintainer"), counted(p.PartitionMoves(), "partition"), counted(len(p.Batches), "batch"), pred.Round(time.Millisecond))
	if p.RestartBy == RestartByHook {
		fmt.Fprintln(w, "  each capture, once drained, is restarted by the rollout's hook (--exec), not asked to exit; the prediction leaves the hook's time out")
	}
	fmt.Fprintln(w)
	if s == nil {
		fmt.Fprintln(w, staleCounts)
		renderBatches(w, p)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tCAPTURE\tROLE\tMAINTAINERS\tPARTITIONS")
	for i, id := range order {
		role := "-"
		if id == s.Coordinator {
			role = "coordinator (hands it over first)"
		}
		maint, parts := 0, 0
		for _, cf := range s.Changefeeds {
			if cf.Maintainer.Node == id {
				maint++
			}
		}
		for _, ps := range s.Partitions {
			if ps.Route.Node == id {
				parts++
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\n", i+1, id, role, maint, parts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	renderBatches(w, p)
	return nil
}

// counted is n and a noun, in its plural for any n but 1 ("batch" takes
// "es").
func counted(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "ch"):
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// staleCounts stands for the per-capture table of a plan gone stale.
const staleCounts = "(Each capture's counts are not shown: the cluster changed since the plan was computed.)"

// StepText says what a step does, in one line.
func StepText(st Step) string {
	switch st.Kind {
	case StepSetLiveness:
		return fmt.Sprintf("%s → %s", st.To, st.Liveness)
	case StepResign:
		return fmt.Sprintf("%s hands the coordinator role over", st.To)
	case StepRestart:
		return fmt.Sprintf("restart %s (it rejoins Alive)", st.To)
	case StepAwaitWork:
		return fmt.Sprintf("%s is given work again", st.To)
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
		return fmt.Sprintf("%s of %s %s → %s", counted(st.Count, "partition"), st.Changefeed, st.From, strings.Join(to, ", "))
	}
	return string(st.Kind)
}
