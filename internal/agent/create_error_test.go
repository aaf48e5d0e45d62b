package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/engine/coordinator"
)

// A create that could not reach its database or sink says to try again;
// only a PostgreSQL source's also says what becomes of the replication
// slot the attempt made: a MySQL or Kafka create makes none.
func TestOnlyAPostgreSQLCreateSpeaksOfItsSlot(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("cannot reach it at 127.0.0.1:1: connection refused: %w", coordinator.ErrUnavailable)
	for _, tc := range []struct {
		source string
		slot   bool
	}{
		{"postgres://cdc@127.0.0.1:1/shop?tables=public.orders", true},
		{"postgresql://cdc@127.0.0.1:1/shop?tables=public.orders", true},
		{"mysql://cdc@127.0.0.1:1/shop?tables=orders", false},
		{"gen://?tables=1", false}, // a Kafka sink that is down
	} {
		var ae *api.Error
		if err := createError(down, "shop", tc.source); !errors.As(err, &ae) || ae.Code != api.CodeUnavailable ||
			!strings.HasPrefix(ae.Hint, "check that it runs and that the coordinator can reach it, then send the same request again; the changefeed is as it was") ||
			strings.Contains(ae.Hint, "replication slot") != tc.slot {
			t.Errorf("%s: %#v", tc.source, err)
		}
	}
}
