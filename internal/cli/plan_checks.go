package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// preCheck runs the pre-checks on p (none with --checks=skip): the
// snapshot p was made from, the changefeeds' states and lags, and for
// those with a database source what it keeps of its log.
func preCheck(ctx context.Context, c *api.Client, snap *model.Snapshot, p *plan.Plan, f *planFlags) ([]plan.Finding, error) {
	mode, err := f.checkMode()
	if err != nil || mode == plan.ChecksSkip {
		return nil, err
	}
	touched := p.Changefeeds()
	if len(touched) == 0 {
		return plan.PreCheck(plan.CheckInput{Snapshot: snap, MaxLag: f.maxLag}, p), nil
	}
	list, err := c.Changefeeds(ctx)
	if err != nil {
		return nil, fmt.Errorf("pre-checks: %w (skip them with --checks=skip)", err)
	}
	health := map[model.ChangefeedID]plan.Health{}
	var database []string
	for _, cf := range list.Changefeeds {
		id := model.ChangefeedID(cf.ID)
		if !slices.Contains(touched, id) {
			continue
		}
		state := model.ChangefeedState(cf.State)
		if state == model.ChangefeedWarning { // shown so: normal, with its Error
			state = model.ChangefeedNormal
		}
		health[id] = plan.Health{State: state, Lag: time.Duration(cf.CheckpointLagMs) * time.Millisecond, Error: cf.Error}
		if isDatabase(cf.Source) {
			database = append(database, cf.ID)
		}
	}
	// The upstreams are asked a few at a time: each answer is a query on
	// the source database.
	var mu sync.Mutex
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, id := range database {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			src := &plan.SourceHealth{}
			r, err := c.Changefeed(ctx, id)
			switch {
			case err != nil:
				src.Err = err.Error()
			case r.SourceStatus == nil:
				src = nil
			case r.SourceStatus.Error != "":
				src.Err = r.SourceStatus.Error
			default:
				ss := r.SourceStatus
				src.RetentionSeconds, src.RetainedBytes, src.SafeBytes, src.WALStatus = ss.RetentionSeconds, ss.RetainedBytes, ss.SafeBytes, ss.WALStatus
			}
			mu.Lock()
			h := health[model.ChangefeedID(id)]
			h.Source = src
			health[model.ChangefeedID(id)] = h
			mu.Unlock()
		}()
	}
	wg.Wait()
	return plan.PreCheck(plan.CheckInput{Snapshot: snap, Health: health, MaxLag: f.maxLag}, p), nil
}

// isDatabase says a changefeed's (redacted) source URI names a database
// whose log retention matters.
func isDatabase(uri string) bool {
	return strings.HasPrefix(uri, "postgres") || strings.HasPrefix(uri, "mysql")
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
	fs, err := preCheck(ctx, c, snap, p, f)
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
