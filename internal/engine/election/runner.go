package election

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// LeadFunc does the coordinator's work for one term and returns when ctx
// ends. It must not outlive ctx.
type LeadFunc func(ctx context.Context, term Term)

// Runner is the election loop of one node incarnation.
type Runner struct {
	self    model.NodeID
	elector Elector
	view    *cluster.View
	store   *meta.Store
	lead    LeadFunc
	log     *slog.Logger

	resignReq chan resignRequest
	stopped   chan struct{}

	mu   sync.Mutex
	term *Term
}

// resignRequest names the term it is meant for, so a request that arrives
// late never ends a newer term.
type resignRequest struct {
	epoch uint64
	reply chan error
}

// NewRunner wires a runner. lead runs while this node is the coordinator.
func NewRunner(self model.NodeID, elector Elector, view *cluster.View, store *meta.Store, lead LeadFunc, log *slog.Logger) *Runner {
	return &Runner{
		self: self, elector: elector, view: view, store: store, lead: lead, log: log,
		resignReq: make(chan resignRequest), stopped: make(chan struct{}),
	}
}

// Current returns the term this node holds, if any.
func (r *Runner) Current() (Term, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.term == nil {
		return Term{}, false
	}
	return *r.term, true
}

// Resign hands the coordinator role over: the current term ends and this
// node campaigns again behind every waiting candidate.
func (r *Runner) Resign(ctx context.Context) error {
	term, ok := r.Current()
	if !ok {
		return ErrNotLeader
	}
	req := resignRequest{epoch: term.Epoch(), reply: make(chan error, 1)}
	select {
	case r.resignReq <- req:
	case <-term.Done:
		return ErrNotLeader
	case <-r.stopped:
		return ErrNotLeader
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run campaigns, leads and steps down until ctx ends. On return this node
// holds no term and has no candidacy.
func (r *Runner) Run(ctx context.Context) error {
	defer close(r.stopped)
	defer func() { _ = r.elector.Withdraw(context.Background()) }()
	for ctx.Err() == nil {
		if err := r.waitMayCampaign(ctx); err != nil {
			return nil
		}
		term, err := r.campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !errors.Is(err, errGateClosed) {
				r.log.Warn("election: campaign failed, retrying", "err", err)
				sleep(ctx, 500*time.Millisecond)
			}
			continue
		}
		r.serve(ctx, term)
	}
	return nil
}

var errGateClosed = errors.New("liveness no longer allows campaigning")

// mayCampaign is the elector-level rule of seed 000: only a registered,
// Alive node campaigns.
func (r *Runner) mayCampaign(st *meta.State) bool {
	_, ok := st.Nodes[r.self]
	return ok && st.LivenessOf(r.self).MayCampaign()
}

// waitMayCampaign blocks until this node may campaign. Meanwhile it keeps
// the node out of the election queue, and a Draining node that finds
// itself the only node left takes seed 000's exception: back to Alive,
// drain record cleared, then it campaigns.
func (r *Runner) waitMayCampaign(ctx context.Context) error {
	for {
		ch := r.view.Changed()
		st := r.view.State()
		if r.mayCampaign(st) {
			return nil
		}
		retry := false
		if st.IsCandidate(r.self) {
			if err := r.elector.Withdraw(ctx); err != nil {
				r.log.Warn("election: could not withdraw a stale candidacy; retrying", "err", err)
				retry = true
			}
		}
		if _, ok := st.Nodes[r.self]; ok && len(st.Nodes) == 1 && st.LivenessOf(r.self) == model.LivenessDraining {
			done, err := r.store.ResetOnlyNodeLeft(ctx, r.self)
			switch {
			case err != nil:
				r.log.Warn("election: only-node-left reset failed; retrying", "err", err)
				retry = true
			case done:
				r.log.Warn("election: this Draining node is the only node left; back to Alive and drain cancelled so the cluster keeps a coordinator")
			}
		}
		var again <-chan time.Time
		if retry {
			again = time.After(time.Second)
		}
		select {
		case <-ch:
		case <-again:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// campaign runs one campaign, abandoned as soon as liveness leaves Alive.
// A won term gets its full fence: the election key and this node's own
// liveness record as it is now, which must be Alive.
func (r *Runner) campaign(ctx context.Context) (Term, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gateClosed := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if r.view.WaitFor(cctx, func(st *meta.State) bool { return !r.mayCampaign(st) }) == nil {
			close(gateClosed)
			cancel()
		}
	}()
	term, err := r.elector.Campaign(cctx)
	cancel()
	wg.Wait()
	select {
	case <-gateClosed:
		if err == nil {
			r.resignQuietly(term)
		}
		return Term{}, errGateClosed
	default:
	}
	if err != nil {
		return Term{}, err
	}
	fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
	defer fcancel()
	full, ferr := r.store.FenceFor(fctx, term.Fence, r.self)
	if ferr != nil {
		r.resignQuietly(term)
		return Term{}, ferr
	}
	term.Fence = full
	return term, nil
}

// serve leads until the term ends, liveness leaves Alive, a resign is
// requested or ctx ends; then it resigns.
func (r *Runner) serve(ctx context.Context, term Term) {
	r.log.Info("election: this node is now the coordinator", "epoch", term.Epoch())
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	term.stepDown = &stepDown{ch: make(chan struct{})}
	r.mu.Lock()
	r.term = &term
	r.mu.Unlock()

	var workers sync.WaitGroup
	leadDone := make(chan struct{})
	workers.Add(2)
	go func() {
		defer workers.Done()
		defer close(leadDone)
		r.lead(lctx, term)
	}()
	gate := make(chan struct{})
	go func() {
		defer workers.Done()
		if r.view.WaitFor(lctx, func(st *meta.State) bool { return !r.mayCampaign(st) }) == nil {
			close(gate)
		}
	}()

	var reply chan error
	reason := ""
	for reason == "" {
		select {
		case <-term.Done:
			reason = "term lost (lease expired or election key removed)"
		case <-gate:
			reason = "own liveness left Alive"
		case req := <-r.resignReq:
			if req.epoch != term.Epoch() {
				req.reply <- ErrNotLeader
				continue
			}
			reply, reason = req.reply, "resign requested"
		case <-ctx.Done():
			reason = "shutting down"
		case <-leadDone:
			reason = "coordinator stopped"
		case <-term.stepDown.ch:
			reason = "the coordinator stepped down (a plan restarts its capture)"
		}
	}
	cancel()
	workers.Wait()
	r.mu.Lock()
	r.term = nil
	r.mu.Unlock()
	err := r.resignQuietly(term)
	r.log.Info("election: no longer the coordinator", "epoch", term.Epoch(), "reason", reason)
	if reply != nil {
		reply <- err
	}
}

func (r *Runner) resignQuietly(term Term) error {
	lostAlready := false
	select {
	case <-term.Done:
		lostAlready = true
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.elector.Resign(ctx)
	if lostAlready || errors.Is(err, ErrNotLeader) {
		// The term ended by itself; there is nothing left to give back.
		return nil
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
