package transport

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A heartbeat carries the position of every partition its node runs for
// the changefeed: 33,000 of them per node at 100,000 one-partition
// tables, twice a second. Decoding that many JSON objects was a sixth of
// the maintainer's node's CPU, so the common case rides as one string,
// "id checkpoint epoch" per line, which decodes without reflection.
// Positions with anything more (final, a hand-over, snapshot copy
// progress) and ids that do not fit the form stay in Partitions.

// CompactPositions splits positions into the compact form and the rest.
func CompactPositions(parts []PartitionProgress) (compact string, rest []PartitionProgress) {
	var b []byte
	for _, p := range parts {
		if p.Final || p.Handover || p.Copy != (model.CopyProgress{}) || p.ID == "" || strings.ContainsAny(p.ID, " \n") {
			rest = append(rest, p)
			continue
		}
		b = append(b, p.ID...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(p.Checkpoint), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, p.Epoch, 10)
		b = append(b, '\n')
	}
	return string(b), rest
}

// Positions are every partition's position in the heartbeat: the compact
// ones, then Partitions. Node is left for the receiver to set (it is the
// sender).
func (hb *Heartbeat) Positions() ([]PartitionProgress, error) {
	out := make([]PartitionProgress, 0, strings.Count(hb.Compact, "\n")+len(hb.Partitions))
	rest := hb.Compact
	for rest != "" {
		line, tail, ok := strings.Cut(rest, "\n")
		if !ok {
			return nil, fmt.Errorf("heartbeat positions: unterminated line %q", clip(line))
		}
		rest = tail
		id, nums, ok1 := strings.Cut(line, " ")
		cp, ep, ok2 := strings.Cut(nums, " ")
		c, err1 := strconv.ParseUint(cp, 10, 64)
		e, err2 := strconv.ParseUint(ep, 10, 64)
		if !ok1 || !ok2 || id == "" || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("heartbeat positions: line %q is not \"id checkpoint epoch\"", clip(line))
		}
		out = append(out, PartitionProgress{ID: id, Progress: model.Progress{Checkpoint: model.Ts(c), Epoch: e}})
	}
	return append(out, hb.Partitions...), nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
