package agent

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 33: the requests counter labelled the raw method, also of callers
// without a token, so made-up methods grew the series (and the agent's
// memory) for ever. A thousand made-up methods and paths, with no token,
// a wrong one and the viewer's, leave the series count where a first
// round of them put it.
func TestMadeUpMethodsAndPathsAddNoSeries(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t)
	tc.tokenFile = filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tc.tokenFile, []byte(viewerToken+",vera,viewer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tc.startCaptures(1)
	addr := tc.nodes["capture-1"].addr
	series := func() (n int, body string) {
		body = tc.get(addr, "/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "cdcctl_http_") {
				n++
			}
		}
		return n, body
	}
	send := func(round, n int) {
		for i := range n {
			method := fmt.Sprintf("M%d%dX", round, i)
			path := fmt.Sprintf("/api/v2/%d/%d", round, i)
			if i%4 == 0 {
				method, path = http.MethodGet, "/api/v2/changefeeds"
			}
			req, err := http.NewRequest(method, "http://"+addr+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			switch i % 3 {
			case 1:
				req.Header.Set("Authorization", "Bearer not-a-token-at-all-000")
			case 2:
				req.Header.Set("Authorization", "bearer "+viewerToken)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	send(0, 100) // every kind of answer once: its series exist
	series()     // and GET /metrics's own
	before, _ := series()
	send(1, 1000)
	after, body := series()
	if after != before {
		t.Fatalf("a thousand made-up methods and paths took the HTTP series from %d to %d:\n%s", before, after, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "cdcctl_http_requests_total{") && strings.Contains(line, `"M1`) {
			t.Fatalf("a made-up method is a label value: %s", line)
		}
	}
	if !strings.Contains(body, `method="other"`) || !strings.Contains(body, `route="GET /api/v2/changefeeds",code="200"`) && !strings.Contains(body, `code="200",method="GET",route="GET /api/v2/changefeeds"`) {
		t.Fatalf("want the made-up methods counted as other and the viewer's reads by route:\n%s", body)
	}
	t.Logf("%d HTTP series before and after 1,000 made-up requests", after)
}
