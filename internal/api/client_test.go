package api

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
)

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestClientFailsOverToTheNextServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, &Status{Version: 1, ClusterID: "c", ServedBy: "capture-2"})
	}))
	defer srv.Close()
	dead := deadAddr(t)
	c, err := NewClient([]string{dead, srv.URL}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		st, err := c.Status(context.Background())
		if err != nil || st.ServedBy != "capture-2" {
			t.Fatalf("status %d: %+v %v", i, st, err)
		}
	}
}

func TestClientNamesEveryAddressWhenNoneAnswers(t *testing.T) {
	a, b := deadAddr(t), deadAddr(t)
	c, err := NewClient([]string{a, b}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Captures(context.Background())
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want UnreachableError", err)
	}
	msg := err.Error()
	for _, want := range []string{a, b, "connection refused", "CDCCTL_SERVER"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}

func TestClientDecodesTheErrorModel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/plain") {
			http.Error(w, "upstream broke", http.StatusConflict)
			return
		}
		writeError(w, Errorf(CodeNotFound, "try capture-1", "capture %q not found", "capture-9"))
	}))
	defer srv.Close()
	c, _ := NewClient([]string{srv.URL}, time.Second)
	_, err := c.Capture(context.Background(), "capture-9")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || e.Hint != "try capture-1" || e.Status() != 404 {
		t.Fatalf("got %#v", err)
	}
	// A body that is not the error model still yields a code from the status.
	err = c.do(context.Background(), http.MethodGet, "/plain", nil, nil)
	if !IsCode(err, CodeConflict) {
		t.Fatalf("plain-text 409: %#v", err)
	}
}

func TestClientRejectsBadServerLists(t *testing.T) {
	for _, in := range [][]string{nil, {""}, {" , "}, {"http://"}} {
		if _, err := NewClient(in, time.Second); err == nil {
			t.Errorf("NewClient(%q) accepted", in)
		}
	}
}

func TestStatusCodesAreMappedInOnePlace(t *testing.T) {
	for code, status := range map[Code]int{
		CodeBadRequest: 400, CodeNotFound: 404, CodeConflict: 409,
		CodeNoCoordinator: 503, CodeUnavailable: 503, CodeInternal: 500, "unknown": 500,
	} {
		if got := (&Error{Code: code}).Status(); got != status {
			t.Errorf("%s → %d, want %d", code, got, status)
		}
	}
}

func TestReadsMoveOnFromAnAgentThatCannotServe(t *testing.T) {
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, Errorf(CodeUnavailable, "", "this capture is not a member of the cluster right now"))
	}))
	defer sick.Close()
	well := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, &Status{Version: 1, ServedBy: "capture-2"})
	}))
	defer well.Close()
	c, _ := NewClient([]string{sick.URL, well.URL}, time.Second)
	if st, err := c.Status(context.Background()); err != nil || st.ServedBy != "capture-2" {
		t.Fatalf("%+v %v", st, err)
	}
	// A write is never re-sent: the sick agent's answer is the answer.
	c, _ = NewClient([]string{sick.URL, well.URL}, time.Second)
	_, err := c.ResignCoordinator(context.Background(), ResignRequest{})
	if !IsCode(err, CodeUnavailable) {
		t.Fatalf("write: %v", err)
	}
}

// An agent that accepts the connection but never answers (stopped with
// SIGSTOP, stalled) does not hold a read for the whole request timeout:
// the read moves on to the next agent, and later reads start there.
func TestReadsMoveOnFromAnAgentThatDoesNotAnswer(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			conn, err := hung.Accept()
			if err != nil {
				return
			}
			accepted <- conn // held open, never answered
		}
	}()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, &Status{Version: 1, ClusterID: "c", ServedBy: "capture-2"})
	}))
	defer srv.Close()
	c, err := NewClient([]string{hung.Addr().String(), srv.URL}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 3; i++ {
		st, err := c.Status(ctx)
		if err != nil || st.ServedBy != "capture-2" {
			t.Fatalf("status %d: %+v %v", i, st, err)
		}
	}
	if n := len(accepted); n != 1 {
		t.Fatalf("the agent that does not answer was asked %d times; want once, then the answering one first", n)
	}
}

// Plain HTTP to an agent serving HTTPS: Go's TLS listener answers 400
// before any handler; the client says what to change.
func TestPlainHTTPToATLSAgentSaysUseHTTPS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, &Status{Version: 1})
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	c, err := NewClient([]string{"http://" + host}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Status(context.Background())
	var ae *Error
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, host+" serves HTTPS") || !strings.Contains(ae.Hint, "use https://"+host) || !strings.Contains(ae.Hint, "--ca-file") {
		t.Fatalf("plain HTTP to a TLS agent: %#v", err)
	}
}

// A verify reads whole tables: it outlives the client's per-request
// timeout (which bounds every other call), and is bounded by its context.
func TestVerifyIsBoundedByItsContextNotTheRequestTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		writeJSON(w, 200, &model.VerifyReport{Version: 1, OK: true, Keys: 7})
	}))
	defer srv.Close()
	c, err := NewClient([]string{srv.URL}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background()); err == nil {
		t.Fatal("a status call outlived the 100ms request timeout")
	}
	rep, err := c.Verify(context.Background(), "demo", VerifyRequest{})
	if err != nil || !rep.OK || rep.Keys != 7 {
		t.Fatalf("verify: %+v %v; want the report", rep, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Verify(ctx, "demo", VerifyRequest{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("verify past its context's deadline: %v; want the deadline", err)
	}
}

// Seed 003's ErrPartitionBusy through the API: a plan refused because a
// partition it touches is moving is answered 409 partition_busy with
// Retry-After: 1, saying what is in progress and for how long.
func TestAPartitionBusyIsAConflictToRetry(t *testing.T) {
	busy := &plan.BusyError{Partition: "p7", Doing: "moving capture-1 → capture-2", Since: time.Now().Add(-3 * time.Second)}
	e, ok := PlanError(busy)
	if !ok {
		t.Fatalf("PlanError(%v) is not a plan error", busy)
	}
	rec := httptest.NewRecorder()
	writeError(rec, e)
	var got Error
	if err := json.NewDecoder(rec.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusConflict || got.Code != CodePartitionBusy || rec.Header().Get("Retry-After") != "1" ||
		!strings.Contains(got.Message, "partition p7 is busy: moving capture-1 → capture-2") || !strings.Contains(got.Message, "(for 3") {
		t.Fatalf("%d %q %+v", rec.Code, rec.Header().Get("Retry-After"), got)
	}
}
