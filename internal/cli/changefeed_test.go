package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
)

// run is cdcctl with args, as a user runs it: its exit code and what it
// printed on stderr.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := Execute(args, strings.NewReader(""), &stdout, &stderr)
	return code, stderr.String()
}

// --partitions-per-table outside 1..64 is a flag's error (exit 64) that
// names the range, found before any agent is asked (none answers here);
// 0 is refused too: the flag's default is 4, 0 is no way to ask for it.
func TestAPartitionsPerTableOutOfRangeIsAUsageError(t *testing.T) {
	for _, n := range []string{"-1", "0", "65"} {
		code, stderr := run(t, "--server", "127.0.0.1:1", "changefeed", "create", "g3", "--source", "gen://?tables=1", "--sink", "file:///tmp/x", "--partitions-per-table", n)
		if code != ExitUsage || !strings.Contains(stderr, "--partitions-per-table "+n+" is out of range: use 1 to 64 (default 4)") || strings.Contains(stderr, "source and sink URIs") {
			t.Errorf("--partitions-per-table %s: exit %d, want 64:\n%s", n, code, stderr)
		}
	}
}

// fakeAgent answers GET of changefeeds as an agent would, from cfs; the
// other requests it records in asked and refuses with refusal (400), or
// 500 without one.
func fakeAgent(t *testing.T, refusal *api.Error, cfs ...api.ChangefeedResponse) (addr string, asked *[]string) {
	t.Helper()
	asked = new([]string)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, cf := range cfs {
			if r.Method == http.MethodGet && r.URL.Path == "/api/v2/changefeeds/"+cf.ID {
				cf.Version = api.SchemaVersion
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(cf)
				return
			}
		}
		*asked = append(*asked, r.Method+" "+r.URL.Path)
		if refusal != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(refusal)
			return
		}
		http.Error(w, "not faked", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), asked
}

// A changefeed created with snapshot=never has no initial snapshot:
// changefeed wait --snapshot refuses it at once (exit 1, as a
// generator's), saying why and what to wait for instead, and does not
// run into its timeout.
func TestWaitingForTheSnapshotOfAChangefeedThatCopiesNothingIsRefusedAtOnce(t *testing.T) {
	never := api.ChangefeedResponse{Changefeed: api.Changefeed{ID: "demo-mysql", State: "normal", Source: "mysql://cdc@127.0.0.1:3306/shop?server-id=7&snapshot=never&tables=shop.orders"},
		SourceStatus: &api.SourceStatus{Kind: "mysql", Snapshot: "none (snapshot=never: only changes after creation)"}}
	gen := api.ChangefeedResponse{Changefeed: api.Changefeed{ID: "demo", State: "normal", Source: "gen://?tables=1"}}
	addr, _ := fakeAgent(t, nil, never, gen)
	for _, tc := range []struct{ id, says string }{
		{"demo-mysql", "changefeed demo-mysql has no initial snapshot to wait for: it was created with snapshot=never (only changes from its creation on); to wait until it has replicated what was written before now, use --caught-up"},
		{"demo", "changefeed demo has no initial snapshot to wait for: its source is not a database"},
	} {
		start := time.Now()
		code, stderr := run(t, "--server", addr, "changefeed", "wait", tc.id, "--snapshot", "--timeout", "3s")
		if code != ExitError || !strings.Contains(stderr, tc.says) || time.Since(start) > 2*time.Second {
			t.Errorf("wait %s --snapshot: exit %d after %s, want 1 at once:\n%s", tc.id, code, time.Since(start).Round(time.Millisecond), stderr)
		}
	}
}

// An update that removes every table is refused by cdcctl (exit 64),
// saying a changefeed needs a table and how to stop replicating them
// all; nothing is sent. A hint about the API's JSON body, which cdcctl
// writes itself, is not shown.
func TestAnUpdateRemovingEveryTableSaysToRemoveTheChangefeed(t *testing.T) {
	shop := api.ChangefeedResponse{Changefeed: api.Changefeed{ID: "shop", State: "paused", Source: "postgres://cdc@127.0.0.1:5432/shop?tables=public.orders,public.items"}}
	addr, asked := fakeAgent(t, &api.Error{Code: api.CodeBadRequest, Message: "an update names the changefeed's tables or sink options", Hint: `send {"tables": ["public.orders", ...]}`}, shop)
	for _, args := range [][]string{
		{"--remove-table", "public.orders", "--remove-table", "items"},
		{"--remove-table", "public.orders,public.items", "--sink-option", "flush-interval=1s"},
	} {
		code, stderr := run(t, append([]string{"--server", addr, "changefeed", "update", "shop", "--yes"}, args...)...)
		if code != ExitUsage || !strings.Contains(stderr, "a changefeed needs at least one table, and this update leaves shop none; to stop replicating all of them, remove the changefeed: cdcctl changefeed remove shop") || strings.Contains(stderr, "send {") {
			t.Errorf("update shop %s: exit %d, want 64:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
	if len(*asked) > 0 {
		t.Errorf("the refused updates were sent: %q", *asked)
	}
	// An agent's hint of the JSON to send is no fix for a cdcctl user.
	code, stderr := run(t, "--server", addr, "changefeed", "resnapshot", "shop", "--yes")
	if code != ExitError || !strings.Contains(stderr, "Error: an update names the changefeed's tables or sink options") || strings.Contains(stderr, "Hint") {
		t.Errorf("an API body as the hint: exit %d:\n%s", code, stderr)
	}
}
