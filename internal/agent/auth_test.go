package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

const (
	viewerToken   = "viewer-token-0123456789"
	operatorToken = "operator-token-0123456789"
	adminToken    = "admin-token-0123456789"
)

// Issue 14: with --token-auth-file every API request needs a bearer
// token whose role may make it; each role against each class of
// endpoint, through a capture that is not the coordinator (the write is
// forwarded with the caller's token, and checked again there). The plan
// record names the authenticated user, not what the client claims.
func TestTokensAndRolesGuardEveryEndpoint(t *testing.T) {
	tc := newTestCluster(t)
	tc.tokenFile = filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tc.tokenFile, []byte("# token,user,role\n"+viewerToken+",vera,viewer\n"+operatorToken+",otto,operator\n"+adminToken+",ada,admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	leader := tc.startCaptures(3)
	var addr string
	for id, rn := range tc.nodes {
		if id != leader.Node {
			addr = rn.addr // a follower: writes are forwarded
			break
		}
	}
	as := func(token string) *api.Client {
		c, err := api.NewClient([]string{addr}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetToken(token)
		return c
	}
	ctx := context.Background()
	denied := func(what string, err error, code api.Code) {
		t.Helper()
		if !api.IsCode(err, code) {
			t.Fatalf("%s: %v; want %s", what, err, code)
		}
	}

	// No token, a wrong token: 401 on reads and writes alike.
	_, err := as("").Captures(ctx)
	denied("a read without a token", err, api.CodeUnauthenticated)
	_, err = as("not-a-token-at-all-000").Changefeeds(ctx)
	denied("a read with a wrong token", err, api.CodeUnauthenticated)
	_, err = as("").CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "x", Source: "gen://", Sink: "blackhole://"})
	denied("a write without a token", err, api.CodeUnauthenticated)
	// Health and metrics stay open (probes and scrapers carry no token).
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s without a token: %d", path, resp.StatusCode)
		}
	}

	// The profiler needs the admin role: profiles show memory contents.
	for token, want := range map[string]int{"": http.StatusUnauthorized, viewerToken: http.StatusForbidden, adminToken: http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/debug/pprof/", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusOK && !strings.Contains(string(body), "goroutine")) {
			t.Fatalf("GET /debug/pprof/ with token %q: %d %.80q; want %d and the profile index", token, resp.StatusCode, body, want)
		}
	}

	// A viewer reads everything and changes nothing.
	if _, err := as(viewerToken).Captures(ctx); err != nil {
		t.Fatalf("a viewer lists captures: %v", err)
	}
	if _, err := as(viewerToken).Snapshot(ctx); err != nil {
		t.Fatalf("a viewer reads the snapshot: %v", err)
	}
	_, err = as(viewerToken).Drain(ctx, string(tc.followerOf(leader.Node)), api.DrainRequest{})
	denied("a viewer drains", err, api.CodeForbidden)
	if !strings.Contains(err.Error(), "operator role") {
		t.Fatalf("the 403 does not name the role needed: %v", err)
	}
	_, err = as(viewerToken).CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "x", Source: "gen://", Sink: "blackhole://"})
	denied("a viewer creates a changefeed", err, api.CodeForbidden)

	// An admin creates a changefeed; an operator may not.
	_, err = as(operatorToken).CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "demo", Source: "gen://?tables=2&keys=10&rate=50", Sink: "blackhole://"})
	denied("an operator creates a changefeed", err, api.CodeForbidden)
	if _, err := as(adminToken).CreateChangefeed(ctx, api.ChangefeedCreateRequest{ID: "demo", Source: "gen://?tables=2&keys=10&rate=50", Sink: "blackhole://", PartitionsPerTable: 2}); err != nil {
		t.Fatalf("an admin creates a changefeed: %v", err)
	}
	if cf, err := as(viewerToken).Changefeed(ctx, "demo"); err != nil || cf.CreatedBy != "ada" {
		t.Fatalf("the changefeed names its creator %q (%v); want the admin's user ada", cf.CreatedBy, err)
	}
	// An operator pauses and resumes it; its incidents say who.
	if _, err := as(operatorToken).PauseChangefeed(ctx, "demo"); err != nil {
		t.Fatalf("an operator pauses a changefeed: %v", err)
	}
	if _, err := as(operatorToken).ResumeChangefeed(ctx, "demo"); err != nil {
		t.Fatalf("an operator resumes a changefeed: %v", err)
	}
	cf, err := as(viewerToken).Changefeed(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	var who []string
	for _, in := range cf.Incidents {
		who = append(who, in.Kind+" "+in.Reason)
	}
	if got := strings.Join(who, ", "); !strings.Contains(got, "paused by otto") || !strings.Contains(got, "resumed by otto") {
		t.Fatalf("the changefeed's incidents: %q; want who paused and resumed it", got)
	}
	// verify reads the upstream with the changefeed's credentials: an
	// operator's, not a viewer's. A sink that keeps nothing is refused.
	_, err = as(viewerToken).Verify(ctx, "demo", api.VerifyRequest{})
	denied("a viewer verifies", err, api.CodeForbidden)
	_, err = as(operatorToken).Verify(ctx, "demo", api.VerifyRequest{})
	denied("an operator verifies a blackhole sink", err, api.CodeBadRequest)
	if !strings.Contains(err.Error(), "blackhole:// sink: it keeps nothing to read back") {
		t.Fatalf("verify of a blackhole sink: %v; want why", err)
	}
	_, err = as(operatorToken).Verify(ctx, "nope", api.VerifyRequest{})
	denied("verify of an unknown changefeed", err, api.CodeNotFound)
	_, err = as(operatorToken).ResignCoordinator(ctx, api.ResignRequest{})
	denied("an operator makes the coordinator resign", err, api.CodeForbidden)

	// An operator runs a plan; its record names the operator, whatever
	// the client claims.
	var snap *api.SnapshotResponse
	var pid string
	var from model.NodeID
	tc.eventually("a partition is placed", 30*time.Second, func() bool {
		if snap, err = as(operatorToken).Snapshot(ctx); err != nil {
			return false
		}
		for _, p := range snap.Snapshot.Partitions {
			if p.Route.Node != "" && p.Route.Status == model.PartitionActive {
				pid, from = p.Route.ID, p.Route.Node
				return true
			}
		}
		return false
	})
	// A rollout restarts every agent, the coordinator's too: an admin's.
	ro, err := plan.Rollout(&snap.Snapshot, nil, 1, plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = as(operatorToken).SubmitPlan(ctx, api.SubmitPlanRequest{Plan: ro, Paused: true})
	denied("an operator submits a rollout", err, api.CodeForbidden)
	if !strings.Contains(err.Error(), "admin role") {
		t.Fatalf("the 403 does not name the role needed: %v", err)
	}
	p, err := plan.Move(&snap.Snapshot, pid, tc.followerOf(from), plan.DefaultCosts)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := as(operatorToken).SubmitPlan(ctx, api.SubmitPlanRequest{Plan: p, SubmittedBy: "mallory@elsewhere"})
	if err != nil {
		t.Fatalf("an operator submits a move: %v", err)
	}
	got, err := as(viewerToken).Plan(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.SubmittedBy != "otto" {
		t.Fatalf("the plan record names %q as its author; want the token's user otto", got.SubmittedBy)
	}
}
