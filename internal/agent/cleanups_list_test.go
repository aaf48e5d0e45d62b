package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A removed changefeed whose slot is not dropped yet (its database
// unreachable) is listed with the changefeed list, its password masked,
// until the coordinator releases it.
func TestTheChangefeedListShowsARemovalsPendingCleanup(t *testing.T) {
	tc := newTestCluster(t)
	tc.startCaptures(1)
	ctx := context.Background()
	rec := model.SourceCleanup{Changefeed: "gone", Since: time.Now().UTC(),
		Source: "postgres://cdc:secret@127.0.0.1:1/shop?tables=public.t&slot=cdcctl_gone&publication=cdcctl_gone&start=1&connect_timeout=1"}
	b, _ := json.Marshal(rec)
	if _, err := tc.cli.Put(ctx, tc.store.Keys().Cleanup("gone"), string(b)); err != nil {
		t.Fatal(err)
	}
	var c *api.Client
	for _, rn := range tc.nodes {
		var err error
		if c, err = api.NewClient([]string{rn.addr}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list, err := c.Changefeeds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.PendingCleanups) == 1 {
			pc := list.PendingCleanups[0]
			if pc.Changefeed != "gone" || strings.Contains(pc.Source, "secret") || !strings.Contains(pc.Source, "slot=cdcctl_gone") {
				t.Fatalf("pending cleanup listed as %+v", pc)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the list shows no pending cleanup: %+v", list)
		}
	}
}
