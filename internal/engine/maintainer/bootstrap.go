package maintainer

import (
	"context"
	"errors"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Seed 000, recovery scenario 6: a maintainer that cannot start on its
// node (it cannot open its changefeed's source there: the database is
// unreachable from that node, say) would leave its changefeed without a
// checkpoint, placements or barriers for as long as it stays. After
// failing for GiveUpAfter (and at least minBootFailures passes), it
// records a "maintainer-failed" incident naming its node and placement in
// the changefeed's status (a write fenced by that placement); the
// coordinator then places the maintainer on another capture and keeps
// this one out of that changefeed's maintainer placements for a while
// (coordinator.MaintainerExclusion).

// bootstrapError is a failure to open a changefeed's source: the
// maintainer cannot start here.
type bootstrapError struct{ err error }

func (e bootstrapError) Error() string { return "open the changefeed's source: " + e.err.Error() }
func (e bootstrapError) Unwrap() error { return e.err }

// minBootFailures: a maintainer gives up after at least this many failed
// passes, however quickly they came.
const minBootFailures = 3

// bootFailure is a maintainer here failing to start, under one placement.
type bootFailure struct {
	epoch    uint64
	since    time.Time
	passes   int
	recorded bool
}

// bootstrapped notes how a pass of e's maintainer went: a failure to
// start counts towards giving up; anything else ends the count.
func (h *Host) bootstrapped(ctx context.Context, e *meta.ChangefeedEntry, err error) {
	cf := e.Info.ID
	var be bootstrapError
	h.mu.Lock()
	if !errors.As(err, &be) {
		delete(h.booting, cf)
		h.mu.Unlock()
		return
	}
	if h.booting == nil {
		h.booting = map[model.ChangefeedID]*bootFailure{}
	}
	f := h.booting[cf]
	if f == nil || f.epoch != e.Maintainer.Epoch {
		f = &bootFailure{epoch: e.Maintainer.Epoch, since: time.Now()}
		h.booting[cf] = f
	}
	f.passes++
	due := !f.recorded && f.passes >= minBootFailures && time.Since(f.since) >= h.cfg.GiveUpAfter
	h.mu.Unlock()
	if !due {
		return
	}
	in := model.Incident{Time: time.Now().UTC(), Kind: model.IncidentMaintainerFailed, Node: h.self, Epoch: e.Maintainer.Epoch,
		Reason: "the maintainer could not start on " + string(h.self) + " for " + time.Since(f.since).Round(time.Second).String() + "; the coordinator places it elsewhere",
		Err:    be.Error()}
	if werr := h.store.RecordIncidents(ctx, e.FenceOf(h.store.Keys()), e, []model.Incident{in}, ""); werr != nil {
		h.log.Warn("maintainer: could not record that it cannot start; will try again", "changefeed", cf, "err", werr)
		return
	}
	h.mu.Lock()
	f.recorded = true
	h.mu.Unlock()
	h.log.Warn("maintainer: cannot start here; asked to be placed elsewhere", "changefeed", cf, "node", h.self, "failing_for", time.Since(f.since).Round(time.Second), "err", be.Error())
}
