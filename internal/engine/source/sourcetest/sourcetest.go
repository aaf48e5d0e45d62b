// Package sourcetest helps tests read sources: a read that fails fails
// the test.
package sourcetest

import (
	"context"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Read is r.Read with a background context; an error fails the test.
func Read(tb testing.TB, r source.Reader, upTo model.Ts, max int) []source.Event {
	tb.Helper()
	evs, err := r.Read(context.Background(), upTo, max)
	if err != nil {
		tb.Fatalf("read up to %d: %v", upTo, err)
	}
	return evs
}
