package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// checkedPlan is a dry run's JSON: the plan as it is submitted, with
// what the pre-checks found.
type checkedPlan struct {
	*plan.Plan
	Checks     []plan.Finding `json:"checks"`
	ChecksMode plan.CheckMode `json:"checks_mode"`
}

// checkData is what the pre-checks read besides the snapshot: the
// changefeeds as listed (state, lag, error) and, for those with a
// database source, what the upstream said of its log (an error in
// Error when it could not be asked). A snapshot file keeps it too.
type checkData struct {
	Changefeeds []api.Changefeed             `json:"changefeeds"`
	Sources     map[string]*api.SourceStatus `json:"sources,omitempty"`
}

// fetchCheckData asks the cluster for the changefeeds' check data; only
// (nil: all) limits the upstreams asked, which are asked a few at a
// time: each answer is a query on the source database.
func fetchCheckData(ctx context.Context, c *api.Client, only []model.ChangefeedID) (*checkData, error) {
	list, err := c.Changefeeds(ctx)
	if err != nil {
		return nil, err
	}
	d := &checkData{Changefeeds: list.Changefeeds, Sources: map[string]*api.SourceStatus{}}
	asked := idSet(only)
	var mu sync.Mutex
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, cf := range list.Changefeeds {
		if !isDatabase(cf.Source) || only != nil && !asked[model.ChangefeedID(cf.ID)] {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer func() { <-sem; wg.Done() }()
			ss := &api.SourceStatus{}
			if r, err := c.Changefeed(ctx, id); err != nil {
				ss.Error = err.Error()
			} else if r.SourceStatus != nil {
				ss = r.SourceStatus
			}
			mu.Lock()
			d.Sources[id] = ss
			mu.Unlock()
		}(cf.ID)
	}
	wg.Wait()
	return d, nil
}

// health is the pre-checks' view of the changefeeds in touched.
func (d *checkData) health(touched []model.ChangefeedID) map[model.ChangefeedID]plan.Health {
	out := map[model.ChangefeedID]plan.Health{}
	want := idSet(touched)
	for _, cf := range d.Changefeeds {
		id := model.ChangefeedID(cf.ID)
		if !want[id] {
			continue
		}
		state := model.ChangefeedState(cf.State)
		if state == model.ChangefeedWarning { // shown so: normal, with its Error
			state = model.ChangefeedNormal
		}
		h := plan.Health{State: state, Lag: time.Duration(cf.CheckpointLagMs) * time.Millisecond, Error: cf.Error}
		if ss, ok := d.Sources[cf.ID]; ok && ss != nil {
			h.Source = &plan.SourceHealth{Err: ss.Error, RetentionSeconds: ss.RetentionSeconds, RetainedBytes: ss.RetainedBytes, SafeBytes: ss.SafeBytes, WALStatus: ss.WALStatus}
		}
		out[id] = h
	}
	return out
}

// idSet is ids as a set: a drain can touch thousands of changefeeds.
func idSet(ids []model.ChangefeedID) map[model.ChangefeedID]bool {
	set := make(map[model.ChangefeedID]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// isDatabase says a changefeed's (redacted) source URI names a database
// whose log retention matters.
func isDatabase(uri string) bool {
	return strings.HasPrefix(uri, "postgres") || strings.HasPrefix(uri, "mysql")
}

// preCheck runs the pre-checks on p (none with --checks=skip), reading
// the check data from data.
func preCheck(ctx context.Context, data checkSource, snap *model.Snapshot, p *plan.Plan, f *planFlags) ([]plan.Finding, error) {
	mode, err := f.checkMode()
	if err != nil || mode == plan.ChecksSkip {
		return nil, err
	}
	in := plan.CheckInput{Snapshot: snap, MaxLag: f.maxLag}
	if touched := p.Changefeeds(); len(touched) > 0 {
		d, err := data(ctx, touched)
		if err != nil {
			return nil, fmt.Errorf("pre-checks: %w (skip them with --checks=skip)", err)
		}
		in.Health = d.health(touched)
	}
	return plan.PreCheck(in, p), nil
}

// checkSource gives the check data of the changefeeds a plan touches:
// the cluster's, or a snapshot file's.
type checkSource func(ctx context.Context, touched []model.ChangefeedID) (*checkData, error)

func liveChecks(c *api.Client) checkSource {
	return func(ctx context.Context, touched []model.ChangefeedID) (*checkData, error) {
		return fetchCheckData(ctx, c, touched)
	}
}

// errBlocked refuses a plan the pre-checks block: exit 10, the findings
// that refuse it in the message with what to do.
func errBlocked(mode plan.CheckMode, fs []plan.Finding) error {
	var b strings.Builder
	n := 0
	for _, f := range fs {
		if f.Severity != plan.Blocker && mode != plan.ChecksStrict {
			continue
		}
		if n++; n <= 3 {
			fmt.Fprintf(&b, "; %s %s: %s (fix: %s)", f.Severity, f.Check, f.Message, f.Hint)
		}
	}
	if n > 3 {
		fmt.Fprintf(&b, "; and %d more", n-3)
	}
	return withExit(ExitBlocked, errors.New("the pre-checks refuse the plan"+b.String()+"; nothing was submitted ('--dry-run' lists them; '--checks=skip' submits anyway)"))
}

// gate runs the pre-checks of a plan about to be submitted: the
// findings are shown on stderr (with -o json only in the error of a
// refusal, so that stderr stays one JSON document), and a plan they
// refuse is not submitted.
func gate(ctx context.Context, o *options, c *api.Client, snap *model.Snapshot, p *plan.Plan, f *planFlags) error {
	mode, err := f.checkMode()
	if err != nil {
		return err
	}
	fs, err := preCheck(ctx, liveChecks(c), snap, p, f)
	if err != nil {
		return err
	}
	if len(fs) > 0 && o.output() != formatJSON {
		plan.RenderFindings(o.errOut, mode, fs)
	}
	if plan.Refuses(mode, fs) {
		return errBlocked(mode, fs)
	}
	return nil
}
