package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/api"
	"github.com/cdcctl/cdcctl/internal/model"
)

func TestThreeNodesElectExactlyOneCoordinator(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(3)

	// Every node answers the same: three Alive captures, one coordinator.
	for id, rn := range tc.nodes {
		c, err := api.NewClient([]string{rn.addr}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		list, err := c.Captures(context.Background())
		if err != nil {
			t.Fatalf("captures via %s: %v", id, err)
		}
		if len(list.Captures) != 3 {
			t.Fatalf("via %s: %d captures, want 3", id, len(list.Captures))
		}
		coordinators := 0
		for _, cp := range list.Captures {
			if cp.Liveness != "Alive" {
				t.Errorf("via %s: %s is %s, want Alive", id, cp.ID, cp.Liveness)
			}
			if cp.Coordinator {
				coordinators++
				if cp.ID != string(leader.Node) {
					t.Errorf("via %s: coordinator %s, etcd says %s", id, cp.ID, leader.Node)
				}
			}
			if cp.PID == 0 || cp.StartedAt.IsZero() || cp.Address == "" {
				t.Errorf("via %s: incomplete capture %+v", id, cp)
			}
		}
		if coordinators != 1 {
			t.Fatalf("via %s: %d coordinators, want 1", id, coordinators)
		}
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Coordinator != string(leader.Node) || st.CoordinatorEpoch != leader.Fence.Epoch() || st.Captures != 3 || st.Alive != 3 || st.ServedBy != string(id) {
			t.Fatalf("via %s: status %+v, leader %s epoch %d", id, st, leader.Node, leader.Fence.Epoch())
		}
	}
	// etcd holds one liveness record per node, all Alive.
	st := tc.state()
	if len(st.Liveness) != 3 {
		t.Fatalf("etcd has %d liveness records, want 3", len(st.Liveness))
	}
}

func TestGracefulStopOfCoordinatorHandsOverAtOnce(t *testing.T) {
	tc := newTestCluster(t)
	old := tc.startCaptures(3)
	if err := tc.stop(old.Node); err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	// A graceful stop revokes the lease and resigns before it returns, so
	// the hand-over never waits for the TTL: the registration and the
	// election key are already gone.
	if st := tc.state(); st.IsCandidate(old.Node) || st.Nodes[old.Node].Info.ID != "" {
		t.Fatalf("after a graceful stop %s is still registered or campaigning", old.Node)
	}
	next := tc.waitLeader()
	if next.Node == old.Node || next.Fence.Epoch() <= old.Fence.Epoch() {
		t.Fatalf("after stopping %s (epoch %d) the coordinator is %s (epoch %d)", old.Node, old.Fence.Epoch(), next.Node, next.Fence.Epoch())
	}
	// The departed node is gone from etcd: registration with its lease,
	// liveness cleaned up by the new coordinator.
	tc.eventually("liveness record of the stopped node removed", 10*time.Second, func() bool {
		st := tc.state()
		_, node := st.Nodes[old.Node]
		_, live := st.Liveness[old.Node]
		return !node && !live
	})
}

func TestStoppingNodePassesThroughStopping(t *testing.T) {
	tc := newTestCluster(t)
	leader := tc.startCaptures(2)
	other := model.NodeID("capture-1")
	if leader.Node == other {
		other = "capture-2"
	}
	// Watch the follower's liveness key while it stops: it must be written
	// as Stopping before the registration disappears.
	wch := tc.cli.Watch(context.Background(), tc.store.Keys().Liveness(other))
	if err := tc.stop(other); err != nil {
		t.Fatal(err)
	}
	select {
	case wr := <-wch:
		var rec model.LivenessRecord
		if len(wr.Events) == 0 || json.Unmarshal(wr.Events[0].Kv.Value, &rec) != nil || rec.State != model.LivenessStopping {
			t.Fatalf("first liveness change of a stopping node: %+v", wr.Events)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no liveness change seen while the node stopped")
	}
}

func TestDuplicateNodeIDIsRefused(t *testing.T) {
	tc := newTestCluster(t)
	tc.startCaptures(1)

	n, err := New(Config{NodeID: "capture-1", Addr: "127.0.0.1:0", Etcd: []string{tc.endpoint}, ClusterID: "test", DataDir: t.TempDir(), SessionTTL: testTTL, LogFormat: "text"}, tc.log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = n.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), `node id "capture-1" is already registered`) || !strings.Contains(err.Error(), "--node-id") {
		t.Fatalf("second capture-1: %v", err)
	}
}

func TestAPIErrorsAreJSONWithTheRightStatus(t *testing.T) {
	tc := newTestCluster(t)
	rn := tc.start("capture-1")
	tc.start("capture-2")
	tc.waitLeader()
	if _, err := tc.client().CreateChangefeed(context.Background(), api.ChangefeedCreateRequest{ID: "taken", Source: "gen://", Sink: "blackhole://"}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + rn.addr
	for _, tt := range []struct {
		method, path, body string
		status             int
		code               api.Code
		mention            string
	}{
		{"GET", "/api/v2/captures/capture-9", "", 404, api.CodeNotFound, "capture-9"},
		{"POST", "/api/v2/coordinator/resign", "{not json", 400, api.CodeBadRequest, "malformed JSON"},
		{"POST", "/api/v2/coordinator/resign", `{"wait":"10s","extra":1}`, 400, api.CodeBadRequest, "extra"},
		{"POST", "/api/v2/coordinator/resign", `{"wait":"soon"}`, 400, api.CodeBadRequest, "soon"},
		{"GET", "/api/v2/nothing", "", 404, api.CodeNotFound, "/api/v2/nothing"},
		{"DELETE", "/api/v2/status", "", 405, api.CodeMethod, "DELETE"},
		{"POST", "/api/v2/changefeeds", "{oops", 400, api.CodeBadRequest, "malformed JSON"},
		{"POST", "/api/v2/changefeeds", `{"id":"a"}`, 400, api.CodeBadRequest, "needs an id, a source and a sink"},
		{"POST", "/api/v2/changefeeds", `{"id":"Bad Name","source":"gen://","sink":"blackhole://"}`, 400, api.CodeBadRequest, "not valid"},
		{"POST", "/api/v2/changefeeds", `{"id":"a","source":"gen://?rate=0","sink":"blackhole://"}`, 400, api.CodeBadRequest, "rate"},
		{"POST", "/api/v2/changefeeds", `{"id":"a","source":"gen://","sink":"kafka://127.0.0.1:1/t?dial-timeout=200ms"}`, 503, api.CodeUnavailable, "cannot reach Kafka"},
		{"POST", "/api/v2/changefeeds", `{"id":"taken","source":"gen://","sink":"blackhole://"}`, 409, api.CodeConflict, "already exists"},
		{"GET", "/api/v2/changefeeds/nope", "", 404, api.CodeNotFound, "nope"},
		{"POST", "/api/v2/changefeeds/nope/pause", "", 404, api.CodeNotFound, "nope"},
		{"DELETE", "/api/v2/changefeeds/nope", "", 404, api.CodeNotFound, "nope"},
		{"GET", "/api/v2/partitions?changefeed=nope", "", 404, api.CodeNotFound, "nope"},
		{"POST", "/api/v2/plans", "{}", 400, api.CodeBadRequest, "carries no plan"},
		{"POST", "/api/v2/plans", `{"plan":{"version":1,"kind":"drain","target":"capture-2"}}`, 400, api.CodeBadRequest, "0 fingerprinted objects"},
		{"POST", "/api/v2/plans", `{"plan":{"version":1,"kind":"teleport","target":"capture-2","batch_size":1,"fingerprint":{"objects":{"node/capture-2":1}}}}`, 400, api.CodeBadRequest, `plan kind "teleport"`},
		{"POST", "/api/v2/plans", `{"plan":{"version":1,"kind":"drain","target":"capture-2","batch_size":-7,"fingerprint":{"objects":{"node/capture-2":1}}}}`, 400, api.CodeBadRequest, "batch_size -7 is out of range"},
		{"POST", "/api/v2/plans", `{"plan":{"version":1,"kind":"drain","target":"capture-2","batch_size":2,"fingerprint":{"objects":{"node/capture-2":1}}}}`, 409, api.CodeStalePlan, "stale"},
		{"POST", "/api/v2/plans", `{"plan":{"version":1,"kind":"drain","target":"capture-2","batch_size":2,"fingerprint":{"objects":{"node/capture-2":1}},"batches":[{"steps":[{"kind":"teleport"}]}]}}`, 400, api.CodeBadRequest, `"teleport" step, which a drain plan does not have`},
		{"POST", "/api/v2/coordinator/resign", `{"wait":"` + strings.Repeat("x", 1<<20) + `"}`, 413, api.CodeTooLarge, "larger than 1048576 bytes"},
		{"GET", "/api/v2//status", "", 404, api.CodeNotFound, "not a clean path"},
		{"GET", "/api/v2/captures/", "", 404, api.CodeNotFound, "not a clean path"},
		{"POST", "/api/v2/plans/nope/pause", "", 404, api.CodeNotFound, "nope"},
	} {
		req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
		status, e, derr := errorOf(t, req)
		if status != tt.status || derr != nil || e.Code != tt.code || !strings.Contains(e.Message, tt.mention) {
			t.Errorf("%s %s %q: status %d, body %+v (%v); want %d %s mentioning %q", tt.method, tt.path, tt.body, status, e, derr, tt.status, tt.code, tt.mention)
		}
	}
	// Headers over the limit: 431 in the error model (Go's server would
	// answer a bare text 431 past its own limit).
	req, _ := http.NewRequest("GET", base+"/api/v2/status", nil)
	req.Header.Set("X-Junk", strings.Repeat("j", 100<<10))
	if status, e, derr := errorOf(t, req); status != http.StatusRequestHeaderFieldsTooLarge || derr != nil || e.Code != api.CodeHeadersTooLarge || e.Hint == "" {
		t.Errorf("100 KiB of headers: status %d, body %+v (%v); want 431 headers_too_large with a hint", status, e, derr)
	}
	// Nothing was resigned or created by the refused requests.
	if l, _ := tc.leader(); l.Node == "" {
		t.Fatal("no coordinator after refused requests")
	}
	if ids := tc.state().ChangefeedIDs(); len(ids) != 1 || ids[0] != "taken" {
		t.Fatalf("changefeeds after refused requests: %v", ids)
	}
}

// errorOf sends req and decodes the error model from its answer.
func errorOf(t *testing.T, req *http.Request) (int, api.Error, error) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	derr := json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e, derr
}

func TestHealthReadyAndMetrics(t *testing.T) {
	tc := newTestCluster(t)
	rn := tc.start("capture-1")
	tc.waitLeader()
	for path, wants := range map[string][]string{
		"/healthz": {"ok"},
		"/readyz":  {`"ready":true`},
		"/metrics": {"cdcctl_election_is_coordinator 1", `cdcctl_build_info{goversion="go1.`,
			// The etcd client's requests: transactions and the watch.
			`cdcctl_etcd_grpc_client_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"}`,
			`cdcctl_etcd_grpc_client_started_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"}`,
			`cdcctl_etcd_grpc_client_handling_seconds_bucket{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary",le="0.001"}`},
	} {
		resp, err := http.Get("http://" + rn.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = ioCopy(&b, resp)
		for _, want := range wants {
			if resp.StatusCode != 200 || !strings.Contains(b.String(), want) {
				t.Errorf("GET %s: %d, body lacks %q:\n%s", path, resp.StatusCode, want, b.String())
			}
		}
	}
	// Requests are counted by route, never by path: an id is not a label.
	for _, path := range []string{"/api/v2/captures/capture-1", "/api/v2/captures/capture-9", "/nope"} {
		if resp, err := http.Get("http://" + rn.addr + path); err == nil {
			resp.Body.Close()
		}
	}
	body := tc.get(rn.addr, "/metrics")
	for _, want := range []string{
		`cdcctl_http_requests_total{code="200",method="GET",route="GET /api/v2/captures/{id}"} 1`,
		`cdcctl_http_requests_total{code="404",method="GET",route="GET /api/v2/captures/{id}"} 1`,
		`cdcctl_http_requests_total{code="200",method="GET",route="GET /healthz"} 1`,
		`cdcctl_http_requests_total{code="404",method="GET",route="other"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `route="GET /api/v2/captures/capture-1"`) || strings.Contains(body, "capture-9") {
		t.Errorf("a request's path became a label value")
	}
}
