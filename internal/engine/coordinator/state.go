package coordinator

// A changefeed's state (normal, paused) as the operator and the
// coordinator's own changes of its tables set it.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// SetChangefeedState pauses (dispatchers stop gracefully, the checkpoint
// stays exact) or resumes a changefeed. A resume reads every held table
// again, or only the tables named (each must have an issue; the others
// stay held).
func (c *Coordinator) SetChangefeedState(ctx context.Context, term election.Term, id model.ChangefeedID, state model.ChangefeedState, by string, tables ...string) error {
	return c.writeStatus(ctx, id, func(e *meta.ChangefeedEntry) error {
		if len(tables) > 0 {
			if state != model.ChangefeedNormal {
				return refuse(ErrInvalid, "only a resume names tables")
			}
			for _, t := range tables {
				if !slices.ContainsFunc(e.Status.Tables, func(i model.TableIssue) bool { return i.Table == t }) {
					return refuse(ErrInvalid, "changefeed %s has no issue with table %s (its tables with issues: %s); 'cdcctl changefeed get %s' lists them", id, t, issueTables(e.Status.Tables), id)
				}
			}
		}
		if r := e.Status.Refollow; r.Active() && state == model.ChangefeedPaused && by != r.By {
			// Paused already, and resumed by the coordinator once its
			// change is made: a pause that says nothing happened would
			// not keep it paused.
			return refuse(ErrInvalid, "changefeed %s is paused by the coordinator while it changes its tables (by %s, since %s), and is resumed once they are changed; pause it after that, or update or resume it now, which takes the change over", id, r.By, r.Since.Format(time.RFC3339))
		}
		if e.Status.State == state && !(state == model.ChangefeedNormal && heldTables(e.Status.Tables)) {
			// A resume of a running changefeed with held tables starts its
			// reader again, which reads them again from where they stopped.
			return nil
		}
		return c.store.SetChangefeedState(ctx, term.Fence, e, state, by, tables...)
	})
}

// writeStatus makes a coordinator's write of a changefeed's status from
// its stored status (its own records only: what the write compares
// against), again while the status moved under it. The maintainer writes
// the status (checkpoint) often; each try pauses a little more: on a
// loaded cluster of many partitions a read of the state takes long
// enough for the status to move again, and twenty tries at once all lost
// the race (a pause answered "try again" after a drain of 6,800 of
// 20,000 partitions).
func (c *Coordinator) writeStatus(ctx context.Context, id model.ChangefeedID, write func(*meta.ChangefeedEntry) error) error {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(min(attempt, 10)) * 20 * time.Millisecond):
			}
		}
		st, err := c.store.LoadChangefeed(ctx, id)
		if err != nil {
			return err
		}
		e, ok := st.Changefeeds[id]
		if !ok {
			return refuse(meta.ErrChangefeedNotFound, "%s", id)
		}
		err = write(e)
		if !errors.Is(err, meta.ErrStale) || attempt >= 20 {
			return err
		}
	}
}

// issueTables names the tables with issues, or says there are none.
func issueTables(issues []model.TableIssue) string {
	if len(issues) == 0 {
		return "none"
	}
	names := make([]string, len(issues))
	for i, ti := range issues {
		names[i] = ti.Table
	}
	return strings.Join(names, ", ")
}

// heldTables says whether any table is held.
func heldTables(issues []model.TableIssue) bool {
	for _, i := range issues {
		if i.State == model.TableHeld {
			return true
		}
	}
	return false
}
