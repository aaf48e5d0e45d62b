package coordinator

import (
	"context"
	"errors"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A re-snapshot of a generator's changefeed is refused for what it is
// (400, exit 1: nothing upstream to copy again) whether it runs or not:
// a running one was told to pause first, and refused anyway once paused.
func TestAResnapshotOfAGeneratorIsRefusedForItsSourceBeforeItsState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := leading(t)
	c, term := f.c, f.term
	if _, err := c.CreateChangefeed(ctx, term, CreateRequest{ID: "demo", Source: "gen://?tables=1&keys=10&rate=10", Sink: "mem://"}); err != nil {
		t.Fatal(err)
	}
	for _, paused := range []bool{false, true} {
		if paused {
			if err := c.SetChangefeedState(ctx, term, "demo", model.ChangefeedPaused, "test"); err != nil {
				t.Fatal(err)
			}
		}
		_, err := c.ResnapshotChangefeed(ctx, term, ResnapshotRequest{ID: "demo", DryRun: true})
		if !errors.Is(err, ErrInvalid) || Detail(err) != "a gen:// changefeed has nothing upstream to copy again" {
			t.Errorf("paused %v: %v", paused, err)
		}
	}
}
