package enginetest

import (
	"maps"
	"sync"

	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// recoveries counts one capture's dispatcher recoveries where the agent
// exports them as metrics (dispatcher.RecoveryMetrics): a test reads the
// same numbers an operator's dashboard would, without an HTTP server.
type recoveries struct {
	mu     sync.Mutex
	counts RecoveryCounts
}

// RecoveryCounts are a capture's recoveries so far (Pending: now).
type RecoveryCounts struct {
	// Recovered counts recoveries completed at dispatcher level.
	Recovered int
	// Pending is the number of recoveries in progress.
	Pending int
	// Answered counts the maintainer's answers by their state.
	Answered map[transport.RecoverState]int
	// Restarted counts changefeed restarts (the fallback) by reason.
	Restarted map[string]int
}

func newRecoveries() *recoveries {
	return &recoveries{counts: RecoveryCounts{Answered: map[transport.RecoverState]int{}, Restarted: map[string]int{}}}
}

func (r *recoveries) Recovered()    { r.mu.Lock(); r.counts.Recovered++; r.mu.Unlock() }
func (r *recoveries) Pending(n int) { r.mu.Lock(); r.counts.Pending = n; r.mu.Unlock() }
func (r *recoveries) Answered(s transport.RecoverState) {
	r.mu.Lock()
	r.counts.Answered[s]++
	r.mu.Unlock()
}
func (r *recoveries) Restarted(reason string) {
	r.mu.Lock()
	r.counts.Restarted[reason]++
	r.mu.Unlock()
}

func (r *recoveries) read() RecoveryCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.counts
	out.Answered, out.Restarted = maps.Clone(r.counts.Answered), maps.Clone(r.counts.Restarted)
	return out
}

// Recoveries are the running captures' recovery counts, by capture (a
// capture started again counts from zero, as a new process does).
func (c *Cluster) Recoveries() map[model.NodeID]RecoveryCounts {
	out := map[model.NodeID]RecoveryCounts{}
	for id, r := range c.captures {
		out[id] = r.recoveries.read()
	}
	return out
}

// RecoveriesTotal sums the running captures' recovery counts.
func (c *Cluster) RecoveriesTotal() RecoveryCounts {
	sum := newRecoveries().counts
	for _, n := range c.Recoveries() {
		sum.Recovered += n.Recovered
		sum.Pending += n.Pending
		for k, v := range n.Answered {
			sum.Answered[k] += v
		}
		for k, v := range n.Restarted {
			sum.Restarted[k] += v
		}
	}
	return sum
}
