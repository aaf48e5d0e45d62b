package plan

import (
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// BusyError refuses an operation on a partition that is being moved or
// split (seed 003's ErrPartitionBusy): retry when it is Active again.
type BusyError struct {
	Partition string
	Doing     string
	Since     time.Time
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("partition %s is busy: %s", e.Partition, e.Doing)
}

func busy(r model.RouteEntry) *BusyError {
	doing := fmt.Sprintf("moving %s → %s", r.Node, r.Target)
	if r.SplitKey != "" {
		doing = fmt.Sprintf("being split at %q on %s", model.DecodeKey(r.Span.Key, r.SplitKey), r.Node)
	}
	return &BusyError{Partition: r.ID, Doing: doing, Since: r.BusySince}
}

func findPartition(s *model.Snapshot, id string) (model.PartitionState, error) {
	for _, p := range s.Partitions {
		if p.Route.ID != id {
			continue
		}
		for _, cf := range s.Changefeeds {
			if cf.ID == p.Route.Changefeed && cf.State != model.ChangefeedNormal {
				// Its maintainer moves its partitions while it is paused
				// only off Draining captures (a drain), and a split needs
				// its dispatcher running: the operation would wait, busy,
				// until a resume.
				return p, &Refusal{RefuseInvalid, fmt.Sprintf("partition %s: changefeed %s is %s", id, cf.ID, cf.State),
					"resume it first ('cdcctl changefeed resume " + string(cf.ID) + "')"}
			}
		}
		return p, nil
	}
	return model.PartitionState{}, &Refusal{RefuseNotFound, fmt.Sprintf("partition %s not found", id), "list them with 'cdcctl partition list'"}
}
