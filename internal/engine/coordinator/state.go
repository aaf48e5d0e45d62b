package coordinator

// A changefeed's state (normal, paused) as the operator and the
// coordinator's own changes of its tables set it.

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/engine/source"
	sources "github.com/cdcctl/cdcctl/internal/engine/source/registry"
	"github.com/cdcctl/cdcctl/internal/model"
)

// ErrUnresumable marks a resume refused because the changefeed's
// upstream no longer holds what it resumes from (a MySQL binary log
// purged while it was stopped, a PostgreSQL slot dropped or created
// again): the changefeed is failed with the reason, for the operator to
// choose what follows.
var ErrUnresumable = errors.New("cannot resume")

// resumeCheckWait bounds a resume's check of the upstream: a database
// that does not answer in time is the reader's to wait for, not a
// reason to refuse.
const resumeCheckWait = 15 * time.Second

// SetChangefeedState pauses (dispatchers stop gracefully, the checkpoint
// stays exact) or resumes a changefeed. A resume reads every held table
// again, or only the tables named (each must have an issue; the others
// stay held).
func (c *Coordinator) SetChangefeedState(ctx context.Context, term election.Term, id model.ChangefeedID, state model.ChangefeedState, by string, tables ...string) error {
	if state == model.ChangefeedNormal {
		if err := c.resumable(ctx, term, id, by, tables); err != nil {
			return err
		}
	}
	return c.writeStatus(ctx, id, func(e *meta.ChangefeedEntry) error {
		if err := stateRefusal(e, state, by, tables); err != nil {
			return err
		}
		if e.Status.State == state && !(state == model.ChangefeedNormal && heldTables(e.Status.Tables)) {
			// A resume of a running changefeed with held tables starts its
			// reader again, which reads them again from where they stopped.
			return nil
		}
		return c.store.SetChangefeedState(ctx, term.Fence, e, state, by, tables...)
	})
}

// stateRefusal is why a pause or resume of e is refused, if it is.
func stateRefusal(e *meta.ChangefeedEntry, state model.ChangefeedState, by string, tables []string) error {
	id := e.Info.ID
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
	return nil
}

// resumable checks, before a stopped database changefeed is resumed,
// that its upstream can still give what it resumes from: one that cannot
// (source.ErrUnresumable) is failed at once with the reason, and the
// resume refused saying it, where before the resume was answered and the
// reader failed the changefeed a moment later. Anything else the check
// meets (a database down, too busy, no answer within resumeCheckWait) is
// left to the reader, which retries and says so: a resume is not refused
// for it. A request refused anyway (a table without an issue) is refused
// before the upstream is asked.
//
// The changefeed is failed only if it is still as checked: stopped, the
// same incarnation, the same resume point. A reader still stopping after
// a pause may store a later point and confirm it upstream (a slot then
// begins past the point checked, rightly); a re-snapshot or an update may
// give it another meanwhile. Then the resume goes on, and its reader
// checks the point it finds.
func (c *Coordinator) resumable(ctx context.Context, term election.Term, id model.ChangefeedID, by string, tables []string) error {
	st, err := c.store.LoadChangefeed(ctx, id)
	if err != nil {
		return err
	}
	checked, ok := st.Changefeeds[id]
	if !ok || checked.Status.State == model.ChangefeedNormal || len(checked.Status.SourcePosition) == 0 {
		return nil // not found: the write says so
	}
	if err := stateRefusal(checked, model.ChangefeedNormal, by, tables); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, resumeCheckWait)
	defer cancel()
	err = sources.Resumable(cctx, checked.Info.SourceURI, checked.Status.SourcePosition)
	if err == nil || !errors.Is(err, source.ErrUnresumable) {
		if err != nil {
			c.log.Info("coordinator: a resume's check of the upstream did not answer; the reader will", "changefeed", id, "err", err)
		}
		return nil
	}
	failed := model.Incident{Time: time.Now().UTC(), Kind: "failed", Node: term.Leader, Reason: err.Error()}
	moved := false
	werr := c.writeStatus(ctx, id, func(e *meta.ChangefeedEntry) error {
		if e.Status.State == model.ChangefeedNormal || !e.Info.SameIncarnation(checked.Info) || !bytes.Equal(e.Status.SourcePosition, checked.Status.SourcePosition) {
			moved = true
			return nil
		}
		return c.store.FailResume(ctx, term.Fence, e, by, failed)
	})
	if werr != nil || moved {
		return werr
	}
	c.log.Warn("coordinator: a resume refused, the changefeed's upstream cannot give what it resumes from; the changefeed fails", "changefeed", id, "err", err)
	return refuse(ErrUnresumable, "changefeed %s cannot resume, and is failed: %v", id, err)
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
