package api

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/plan"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// Backend is what the API serves. The agent wires it to the engine; tests
// may wire it to anything that behaves like a cluster.
type Backend interface {
	Status(ctx context.Context) (*Status, error)
	Captures(ctx context.Context) (*CaptureList, error)
	Capture(ctx context.Context, id string) (*CaptureResponse, error)
	Snapshot(ctx context.Context) (*SnapshotResponse, error)
	ResignCoordinator(ctx context.Context, req ResignRequest) (*ResignResponse, error)
	Changefeeds(ctx context.Context) (*ChangefeedList, error)
	Changefeed(ctx context.Context, id string) (*ChangefeedResponse, error)
	// The changefeed writes below run on the coordinator.
	CreateChangefeed(ctx context.Context, req ChangefeedCreateRequest) (*ChangefeedResponse, error)
	PreviewChangefeed(ctx context.Context, req ChangefeedCreateRequest) (*ChangefeedPreview, error)
	// SetChangefeedPaused pauses or resumes a changefeed; a resume may
	// name the held tables to read again (none: all of them).
	SetChangefeedPaused(ctx context.Context, id string, paused bool, tables []string) (*ChangefeedResponse, error)
	RemoveChangefeed(ctx context.Context, id string) (*RemoveResponse, error)
	UpdateChangefeed(ctx context.Context, id string, req ChangefeedUpdateRequest) (*ChangefeedUpdateResponse, error)
	ResnapshotChangefeed(ctx context.Context, id string, req ResnapshotRequest) (*ChangefeedUpdateResponse, error)
	Partitions(ctx context.Context, changefeed, node string) (*PartitionList, error)
	Partition(ctx context.Context, id string) (*PartitionResponse, error)
	// Verify reads what the changefeed's sink holds and reports whether
	// it is what the source produced (on any agent).
	Verify(ctx context.Context, id string, req VerifyRequest) (*model.VerifyReport, error)
	// Drain starts draining a capture (on the coordinator).
	Drain(ctx context.Context, id string, req DrainRequest) (*DrainCaptureResponse, error)
	DrainStatus(ctx context.Context, id string) (*DrainStatusResponse, error)
	// SubmitPlan submits a plan exactly as computed (on the coordinator).
	SubmitPlan(ctx context.Context, req SubmitPlanRequest) (*PlanResponse, error)
	Plans(ctx context.Context) (*PlanList, error)
	Plan(ctx context.Context, id string) (*PlanResponse, error)
	RequestPlan(ctx context.Context, id string, req exec.Request) (*PlanResponse, error)
	// SetPlanBudget changes a running plan's lag budget (on the
	// coordinator).
	SetPlanBudget(ctx context.Context, id string, req SetBudgetRequest) (*PlanResponse, error)
	// WaitPlan returns a plan's record once it holds an event after seq
	// or has ended, woken by the node's view of etcd (not polled), or
	// when ctx ends.
	WaitPlan(ctx context.Context, id string, seq uint64) (*PlanResponse, error)
	// Coordinator says whether this node is the coordinator, and if not,
	// the API address of the one that is (ok=false: none elected). It
	// waits up to wait for one to be known, woken by the node's view.
	Coordinator(ctx context.Context, wait time.Duration) (self bool, addr string, ok bool)
}

// ForwardedHeader marks a request a non-coordinator passed on, so that a
// request never travels in a loop while leadership is moving.
const ForwardedHeader = "X-Cdcctl-Forwarded-By"

// maxBody bounds request bodies; nothing the API accepts comes close.
const maxBody = 1 << 20

type server struct {
	b    Backend
	self string
	log  *slog.Logger
	// scheme and client forward writes to the coordinator.
	scheme string
	client *http.Client
}

// HandlerOption configures NewHandler.
type HandlerOption func(*server)

// ForwardOverTLS forwards writes to the coordinator over https with tls
// (the agent's own certificate and the cluster's CA).
func ForwardOverTLS(tls *tls.Config) HandlerOption {
	return func(s *server) {
		s.scheme = "https"
		s.client = &http.Client{Transport: &http.Transport{TLSClientConfig: tls.Clone(), ForceAttemptHTTP2: true}}
	}
}

// NewHandler serves the API for a backend. self names this node in
// forwarding headers.
func NewHandler(b Backend, self string, log *slog.Logger, opts ...HandlerOption) http.Handler {
	s := &server{b: b, self: self, log: log, scheme: "http", client: http.DefaultClient}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v2/status", s.status)
	mux.HandleFunc("GET /api/v2/captures", s.captures)
	mux.HandleFunc("GET /api/v2/captures/{id}", s.capture)
	mux.HandleFunc("GET /api/v2/snapshot", s.snapshot)
	mux.HandleFunc("PUT /api/v2/captures/{id}/drain", s.onCoordinator(s.drain))
	mux.HandleFunc("GET /api/v2/captures/{id}/drain", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		reply(w, func(ctx context.Context) (*DrainStatusResponse, error) { return s.b.DrainStatus(ctx, id) })(r.Context())
	})
	mux.HandleFunc("POST /api/v2/coordinator/resign", s.onCoordinator(s.resign))
	mux.HandleFunc("POST /api/v2/plans", s.onCoordinator(s.submitPlan))
	mux.HandleFunc("GET /api/v2/plans", func(w http.ResponseWriter, r *http.Request) { reply(w, s.b.Plans)(r.Context()) })
	mux.HandleFunc("GET /api/v2/plans/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		reply(w, func(ctx context.Context) (*PlanResponse, error) { return s.b.Plan(ctx, id) })(r.Context())
	})
	mux.HandleFunc("GET /api/v2/plans/{id}/events", s.planEvents)
	for _, req := range []exec.Request{exec.RequestPause, exec.RequestResume, exec.RequestCancel} {
		mux.HandleFunc("POST /api/v2/plans/{id}/"+string(req), s.onCoordinator(func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			v, err := s.b.RequestPlan(r.Context(), id, req)
			if err != nil {
				writeError(w, err)
				return
			}
			writeJSON(w, http.StatusAccepted, v)
		}))
	}
	mux.HandleFunc("POST /api/v2/plans/{id}/budget", s.onCoordinator(s.setPlanBudget))
	mux.HandleFunc("GET /api/v2/changefeeds", func(w http.ResponseWriter, r *http.Request) { reply(w, s.b.Changefeeds)(r.Context()) })
	mux.HandleFunc("GET /api/v2/changefeeds/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		reply(w, func(ctx context.Context) (*ChangefeedResponse, error) { return s.b.Changefeed(ctx, id) })(r.Context())
	})
	mux.HandleFunc("POST /api/v2/changefeeds", s.onCoordinator(s.createChangefeed))
	mux.HandleFunc("POST /api/v2/changefeeds/{id}/pause", s.onCoordinator(s.pauseChangefeed(true)))
	mux.HandleFunc("POST /api/v2/changefeeds/{id}/resume", s.onCoordinator(s.pauseChangefeed(false)))
	mux.HandleFunc("DELETE /api/v2/changefeeds/{id}", s.onCoordinator(s.removeChangefeed))
	mux.HandleFunc("PATCH /api/v2/changefeeds/{id}", s.onCoordinator(s.updateChangefeed))
	mux.HandleFunc("POST /api/v2/changefeeds/{id}/resnapshot", s.onCoordinator(s.resnapshotChangefeed))
	mux.HandleFunc("POST /api/v2/changefeeds/{id}/verify", s.verify)
	mux.HandleFunc("GET /api/v2/partitions", func(w http.ResponseWriter, r *http.Request) {
		cf, node := r.URL.Query().Get("changefeed"), r.URL.Query().Get("node")
		reply(w, func(ctx context.Context) (*PartitionList, error) { return s.b.Partitions(ctx, cf, node) })(r.Context())
	})
	mux.HandleFunc("GET /api/v2/partitions/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		reply(w, func(ctx context.Context) (*PartitionResponse, error) { return s.b.Partition(ctx, id) })(r.Context())
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, Errorf(CodeMethod, "use "+strings.Join(allow, " or "), "method %s is not allowed on %s", r.Method, r.URL.Path))
			return
		}
		writeError(w, Errorf(CodeNotFound, "see docs/api.md for the endpoints", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return RecordRoute(mux)
}

// tooLarge is the error of a request body over maxBody.
func tooLarge() *Error {
	return Errorf(CodeTooLarge, "send the JSON object described in docs/api.md; no request needs more", "request body is larger than %d bytes", maxBody)
}

func (s *server) status(w http.ResponseWriter, r *http.Request) {
	reply(w, s.b.Status)(r.Context())
}

func (s *server) captures(w http.ResponseWriter, r *http.Request) {
	reply(w, s.b.Captures)(r.Context())
}

func (s *server) capture(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	reply(w, func(ctx context.Context) (*CaptureResponse, error) { return s.b.Capture(ctx, id) })(r.Context())
}

func (s *server) snapshot(w http.ResponseWriter, r *http.Request) {
	reply(w, s.b.Snapshot)(r.Context())
}

func (s *server) resign(w http.ResponseWriter, r *http.Request) {
	var req ResignRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	reply(w, func(ctx context.Context) (*ResignResponse, error) { return s.b.ResignCoordinator(ctx, req) })(r.Context())
}

func (s *server) createChangefeed(w http.ResponseWriter, r *http.Request) {
	var req ChangefeedCreateRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.ID == "" || req.Source == "" || req.Sink == "" {
		writeError(w, Errorf(CodeBadRequest, `send {"id": "...", "source": "gen://...", "sink": "..."}`, "a changefeed needs an id, a source and a sink"))
		return
	}
	if req.DryRun {
		reply(w, func(ctx context.Context) (*ChangefeedPreview, error) { return s.b.PreviewChangefeed(ctx, req) })(r.Context())
		return
	}
	v, err := s.b.CreateChangefeed(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, v)
}

func (s *server) drain(w http.ResponseWriter, r *http.Request) {
	var req DrainRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	req.SubmittedBy = submitter(r, req.SubmittedBy)
	if req.Batch < 0 || req.Batch > plan.MaxBatch {
		writeError(w, Errorf(CodeBadRequest, fmt.Sprintf("use a batch between 1 and %d", plan.MaxBatch), "batch %d is out of range", req.Batch))
		return
	}
	if p := req.Plan; p != nil {
		// Checked as POST /api/v2/plans checks one: a plan without its
		// fingerprint, of another kind or capture, or malformed, would
		// run on a cluster it was not computed for, or never end.
		switch {
		case p.Version != 1 || len(p.Fingerprint.Objects) == 0:
			writeError(w, Errorf(CodeBadRequest, "compute the plan with 'cdcctl drain --dry-run --plan-out FILE' and submit that file", "the plan has version %d and %d fingerprinted objects; want version 1 and its fingerprint", p.Version, len(p.Fingerprint.Objects)))
			return
		case p.Kind != plan.KindDrain || string(p.Target) != r.PathValue("id"):
			writeError(w, Errorf(CodeBadRequest, "submit a drain plan of this capture, or other plans with POST /api/v2/plans", "the plan is a %s of %s, not a drain of %s", p.Kind, p.Target, r.PathValue("id")))
			return
		}
		if err := p.Validate(); err != nil {
			writeError(w, Errorf(CodeBadRequest, "compute the plan with --dry-run --plan-out FILE and submit it unchanged", "%v", err))
			return
		}
	}
	v, err := s.b.Drain(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, v)
}

func (s *server) submitPlan(w http.ResponseWriter, r *http.Request) {
	var req SubmitPlanRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	req.SubmittedBy = submitter(r, req.SubmittedBy)
	if req.Plan == nil || req.Plan.Kind == "" {
		writeError(w, Errorf(CodeBadRequest, "send {\"plan\": <the JSON of 'cdcctl ... --dry-run --plan-out FILE'>}", "the request carries no plan"))
		return
	}
	if req.Plan.Version != 1 || len(req.Plan.Fingerprint.Objects) == 0 {
		// Without its fingerprint a plan cannot be checked against what
		// it read: it would run on a cluster it was not computed for.
		writeError(w, Errorf(CodeBadRequest, "compute the plan with --dry-run --plan-out FILE and submit that file", "the plan has version %d and %d fingerprinted objects; want version 1 and its fingerprint", req.Plan.Version, len(req.Plan.Fingerprint.Objects)))
		return
	}
	if err := req.Plan.Validate(); err != nil {
		writeError(w, Errorf(CodeBadRequest, "compute the plan with --dry-run --plan-out FILE and submit it unchanged", "%v", err))
		return
	}
	v, err := s.b.SubmitPlan(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, v)
}

func (s *server) pauseChangefeed(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		var req ResumeRequest
		if !paused {
			if err := decodeOptional(r, &req); err != nil {
				writeError(w, err)
				return
			}
		}
		reply(w, func(ctx context.Context) (*ChangefeedResponse, error) {
			return s.b.SetChangefeedPaused(ctx, id, paused, req.Tables)
		})(r.Context())
	}
}

func (s *server) updateChangefeed(w http.ResponseWriter, r *http.Request) {
	var req ChangefeedUpdateRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Tables) == 0 && len(req.SinkOptions) == 0 && len(req.CopyAgain) == 0 && req.Source == "" {
		writeError(w, Errorf(CodeBadRequest, `send {"tables": ["public.orders", ...]} (every table the changefeed replicates from now on), {"copy_again": [...]}, {"sink_options": {"flush-interval": "1s"}} or {"source": "postgres://user:password@host/db"} (its connection)`, "an update names the changefeed's tables, sink options or source connection"))
		return
	}
	id := r.PathValue("id")
	reply(w, func(ctx context.Context) (*ChangefeedUpdateResponse, error) {
		return s.b.UpdateChangefeed(ctx, id, req)
	})(r.Context())
}

func (s *server) resnapshotChangefeed(w http.ResponseWriter, r *http.Request) {
	var req ResnapshotRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	reply(w, func(ctx context.Context) (*ChangefeedUpdateResponse, error) {
		return s.b.ResnapshotChangefeed(ctx, id, req)
	})(r.Context())
}

func (s *server) verify(w http.ResponseWriter, r *http.Request) {
	var req VerifyRequest
	if err := decodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.WaitMs < 0 {
		writeError(w, Errorf(CodeBadRequest, `send {"wait_ms": N} with N >= 0, or no body`, "wait_ms %d is negative", req.WaitMs))
		return
	}
	id := r.PathValue("id")
	reply(w, func(ctx context.Context) (*model.VerifyReport, error) {
		return s.b.Verify(ctx, id, req)
	})(r.Context())
}

func (s *server) removeChangefeed(w http.ResponseWriter, r *http.Request) {
	reply(w, func(ctx context.Context) (*RemoveResponse, error) {
		out, err := s.b.RemoveChangefeed(ctx, r.PathValue("id"))
		if out != nil {
			out.CleanupError = redact.Text(out.CleanupError)
		}
		return out, err
	})(r.Context())
}

// reply runs a backend call and writes its result or its error.
func reply[T any](w http.ResponseWriter, call func(context.Context) (T, error)) func(context.Context) {
	return func(ctx context.Context) {
		v, err := call(ctx)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// decodeOptional reads a JSON body if there is one. Unknown fields are
// refused so that a typo does not silently do the default.
func decodeOptional(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return Errorf(CodeBadRequest, "", "could not read the request body: %v", err)
	}
	if len(body) > maxBody {
		return tooLarge()
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(CodeBadRequest, "send a JSON object as described in docs/api.md", "malformed JSON body: %v", err)
	}
	if dec.More() {
		return Errorf(CodeBadRequest, "send exactly one JSON object", "malformed JSON body: trailing data after the object")
	}
	return nil
}

// submitter is who a plan's record names: the user the token
// authenticated when the agent checks tokens (what the client claims is
// not taken), else what the client says.
func submitter(r *http.Request, claimed string) string {
	if p, ok := PrincipalOf(r.Context()); ok {
		return p.User
	}
	return claimed
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError writes any error in the error model, with its status.
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

// writeError is the one door every failed request's body leaves by, so
// it is where secrets are masked: an opener, a driver or a library may
// quote back the URI or DSN it refused, whoever wrapped its error.
func writeError(w http.ResponseWriter, err error) {
	e := Redacted(AsError(err))
	if errors.Is(err, context.Canceled) {
		e = Errorf(CodeUnavailable, "try again", "request cancelled")
	}
	if e.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfterSeconds))
	}
	writeJSON(w, e.Status(), e)
}

// planEvents streams a plan's events as server-sent events: everything so
// far (after a reconnect: the plan as it stands), then each change, until
// the plan is over (the last event is done, failed or cancelled) or the
// client goes away. Any agent serves it: it reads the plan's record,
// which the coordinator keeps in etcd.
func (s *server) planEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	cur, err := s.b.Plan(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, Errorf(CodeInternal, "poll GET /api/v2/plans/{id} instead", "this server cannot stream"))
		return
	}
	var stream exec.Stream
	// A client that reconnects (EventSource does by itself) says the last
	// id it got: the ids go on after it, so no id repeats, and the stream
	// starts again from the plan as it stands. An id no stream sends is
	// refused before the stream begins.
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		last, err := strconv.ParseUint(h, 10, 64)
		if err == nil {
			err = stream.After(last)
		}
		if err != nil {
			writeError(w, Errorf(CodeBadRequest, "reconnect with the last id this stream sent, or without Last-Event-ID to start again",
				"Last-Event-ID %.40q: %v", h, exec.ErrEventID))
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for {
		for _, ev := range stream.Next(cur.Record()) {
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b)
		}
		flusher.Flush()
		if cur.State.Terminal() {
			return
		}
		next, err := s.b.WaitPlan(r.Context(), id, cur.Seq)
		if r.Context().Err() != nil {
			return
		}
		if err != nil {
			// Gone (pruned) or not readable here any more: the client
			// reconnects and hears why.
			s.log.Warn("plan event stream ended", "plan", id, "err", err)
			return
		}
		cur = next
	}
}
