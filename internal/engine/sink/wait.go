package sink

import (
	"context"
	"sync"
)

// WaitCond waits on cond, whose lock the caller holds, until ready holds,
// failed returns an error (the sink closed, say), or ctx ends. Sinks use it
// for backpressure and for Flush: a plain cond.Wait cannot see ctx.
func WaitCond(ctx context.Context, cond *sync.Cond, ready func() bool, failed func() error) error {
	stop := context.AfterFunc(ctx, func() {
		cond.L.Lock()
		cond.Broadcast()
		cond.L.Unlock()
	})
	defer stop()
	for !ready() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := failed(); err != nil {
			return err
		}
		cond.Wait()
	}
	return nil
}
