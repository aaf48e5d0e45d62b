package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cdcctl/cdcctl/internal/exec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Client is the typed client of the API. It is given every address an
// operator knows and fails over between them: a request goes to the last
// address that answered, and moves on when that one cannot be reached.
type Client struct {
	servers []string
	hc      *http.Client
	token   string // bearer token; "" sends none

	mu   sync.Mutex
	next int
}

// UnreachableError says that no address answered, and what each one said.
type UnreachableError struct {
	Tried []string
	Errs  []error
}

func (e *UnreachableError) Error() string {
	var b strings.Builder
	b.WriteString("cannot reach any cdc-agent: tried ")
	for i, s := range e.Tried {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%v)", s, shortNetErr(e.Errs[i]))
	}
	b.WriteString("; check --server (or CDCCTL_SERVER) and that the agents are running")
	return b.String()
}

// shortNetErr drops the URL and method net/http prepends.
func shortNetErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// NewClient returns a client for a list of host:port (or http://host:port)
// addresses.
func NewClient(servers []string, timeout time.Duration) (*Client, error) {
	var clean []string
	var parts []string
	for _, s := range servers {
		parts = append(parts, strings.Split(s, ",")...)
	}
	for _, s := range parts {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("server address %q is not host:port", s)
		}
		clean = append(clean, u.Scheme+"://"+u.Host)
	}
	if len(clean) == 0 {
		return nil, errors.New("no server address given; set --server or CDCCTL_SERVER to host:port[,host:port...]")
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return &Client{servers: clean, hc: &http.Client{Timeout: timeout}}, nil
}

// SetTLS makes https:// addresses trust what cfg trusts (its RootCAs:
// the cluster's CA).
func (c *Client) SetTLS(cfg *tls.Config) {
	c.hc.Transport = &http.Transport{TLSClientConfig: cfg.Clone(), ForceAttemptHTTP2: true, Proxy: http.ProxyFromEnvironment}
}

// SetToken makes every request carry token as its bearer token.
func (c *Client) SetToken(token string) { c.token = token }

// Servers returns the addresses the client tries.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// Status is GET /api/v2/status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var out Status
	return &out, c.do(ctx, http.MethodGet, "/api/v2/status", nil, &out)
}

// Captures is GET /api/v2/captures.
func (c *Client) Captures(ctx context.Context) (*CaptureList, error) {
	var out CaptureList
	return &out, c.do(ctx, http.MethodGet, "/api/v2/captures", nil, &out)
}

// Capture is GET /api/v2/captures/{id}.
func (c *Client) Capture(ctx context.Context, id string) (*CaptureResponse, error) {
	var out CaptureResponse
	return &out, c.do(ctx, http.MethodGet, "/api/v2/captures/"+url.PathEscape(id), nil, &out)
}

// Snapshot is GET /api/v2/snapshot.
func (c *Client) Snapshot(ctx context.Context) (*SnapshotResponse, error) {
	var out SnapshotResponse
	return &out, c.do(ctx, http.MethodGet, "/api/v2/snapshot", nil, &out)
}

// ResignCoordinator is POST /api/v2/coordinator/resign.
func (c *Client) ResignCoordinator(ctx context.Context, req ResignRequest) (*ResignResponse, error) {
	var out ResignResponse
	return &out, c.do(ctx, http.MethodPost, "/api/v2/coordinator/resign", req, &out)
}

// Changefeeds is GET /api/v2/changefeeds.
func (c *Client) Changefeeds(ctx context.Context) (*ChangefeedList, error) {
	var out ChangefeedList
	return &out, c.do(ctx, http.MethodGet, "/api/v2/changefeeds", nil, &out)
}

// Changefeed is GET /api/v2/changefeeds/{id}.
func (c *Client) Changefeed(ctx context.Context, id string) (*ChangefeedResponse, error) {
	var out ChangefeedResponse
	return &out, c.do(ctx, http.MethodGet, "/api/v2/changefeeds/"+url.PathEscape(id), nil, &out)
}

// CreateChangefeed is POST /api/v2/changefeeds.
//
// A create may take longer than a request (its source's slot is created,
// its tables are read), and the agent finishes it even if the client
// gives up: it waits up to CreateWait, or the request timeout if longer.
func (c *Client) CreateChangefeed(ctx context.Context, req ChangefeedCreateRequest) (*ChangefeedResponse, error) {
	var out ChangefeedResponse
	ctx, cancel := context.WithTimeout(ctx, max(c.hc.Timeout, CreateWait))
	defer cancel()
	long := &http.Client{Transport: c.hc.Transport}
	return &out, c.doWith(long, ctx, http.MethodPost, "/api/v2/changefeeds", req, &out)
}

// CreateWait is how long a create is waited for: what the agent allows
// it (two minutes), and some.
const CreateWait = 150 * time.Second

// PreviewChangefeed is POST /api/v2/changefeeds with dry_run.
func (c *Client) PreviewChangefeed(ctx context.Context, req ChangefeedCreateRequest) (*ChangefeedPreview, error) {
	req.DryRun = true
	var out ChangefeedPreview
	return &out, c.do(ctx, http.MethodPost, "/api/v2/changefeeds", req, &out)
}

// PauseChangefeed and ResumeChangefeed are POST .../pause and .../resume.
func (c *Client) PauseChangefeed(ctx context.Context, id string) (*ChangefeedResponse, error) {
	var out ChangefeedResponse
	return &out, c.do(ctx, http.MethodPost, "/api/v2/changefeeds/"+url.PathEscape(id)+"/pause", nil, &out)
}

// ResumeChangefeed resumes a changefeed; tables, if given, are the held
// tables to read again (the others stay held).
func (c *Client) ResumeChangefeed(ctx context.Context, id string, tables ...string) (*ChangefeedResponse, error) {
	var out ChangefeedResponse
	var body any
	if len(tables) > 0 {
		body = ResumeRequest{Tables: tables}
	}
	return &out, c.do(ctx, http.MethodPost, "/api/v2/changefeeds/"+url.PathEscape(id)+"/resume", body, &out)
}

// Verify is POST /api/v2/changefeeds/{id}/verify: the agent reads the
// sink (and a database source's upstream) and reports. It can take
// minutes, so it is bounded by ctx, not by the client's request timeout.
func (c *Client) Verify(ctx context.Context, id string, req VerifyRequest) (*model.VerifyReport, error) {
	var out model.VerifyReport
	long := &http.Client{Transport: c.hc.Transport}
	return &out, c.doWith(long, ctx, http.MethodPost, "/api/v2/changefeeds/"+url.PathEscape(id)+"/verify", req, &out)
}

// RemoveChangefeed is DELETE /api/v2/changefeeds/{id}.
func (c *Client) RemoveChangefeed(ctx context.Context, id string) (*RemoveResponse, error) {
	out := RemoveResponse{Version: SchemaVersion, Removed: id} // an agent answering 204
	return &out, c.do(ctx, http.MethodDelete, "/api/v2/changefeeds/"+url.PathEscape(id), nil, &out)
}

// UpdateChangefeed is PATCH /api/v2/changefeeds/{id}.
func (c *Client) UpdateChangefeed(ctx context.Context, id string, req ChangefeedUpdateRequest) (*ChangefeedUpdateResponse, error) {
	var out ChangefeedUpdateResponse
	return &out, c.do(ctx, http.MethodPatch, "/api/v2/changefeeds/"+url.PathEscape(id), req, &out)
}

// ResnapshotChangefeed is POST /api/v2/changefeeds/{id}/resnapshot.
func (c *Client) ResnapshotChangefeed(ctx context.Context, id string, req ResnapshotRequest) (*ChangefeedUpdateResponse, error) {
	var out ChangefeedUpdateResponse
	return &out, c.do(ctx, http.MethodPost, "/api/v2/changefeeds/"+url.PathEscape(id)+"/resnapshot", req, &out)
}

// Partitions is GET /api/v2/partitions, optionally filtered.
func (c *Client) Partitions(ctx context.Context, changefeed, node string) (*PartitionList, error) {
	q := url.Values{}
	if changefeed != "" {
		q.Set("changefeed", changefeed)
	}
	if node != "" {
		q.Set("node", node)
	}
	var out PartitionList
	return &out, c.do(ctx, http.MethodGet, "/api/v2/partitions?"+q.Encode(), nil, &out)
}

// Drain is PUT /api/v2/captures/{id}/drain.
func (c *Client) Drain(ctx context.Context, id string, req DrainRequest) (*DrainCaptureResponse, error) {
	var out DrainCaptureResponse
	return &out, c.do(ctx, http.MethodPut, "/api/v2/captures/"+url.PathEscape(id)+"/drain", req, &out)
}

// DrainStatus is GET /api/v2/captures/{id}/drain.
func (c *Client) DrainStatus(ctx context.Context, id string) (*DrainStatusResponse, error) {
	var out DrainStatusResponse
	return &out, c.do(ctx, http.MethodGet, "/api/v2/captures/"+url.PathEscape(id)+"/drain", nil, &out)
}

// Partition is GET /api/v2/partitions/{id}.
func (c *Client) Partition(ctx context.Context, id string) (*PartitionResponse, error) {
	var out PartitionResponse
	return &out, c.do(ctx, http.MethodGet, "/api/v2/partitions/"+url.PathEscape(id), nil, &out)
}

// SubmitPlan is POST /api/v2/plans.
func (c *Client) SubmitPlan(ctx context.Context, req SubmitPlanRequest) (*PlanResponse, error) {
	var out PlanResponse
	return &out, c.do(ctx, http.MethodPost, "/api/v2/plans", req, &out)
}

// Plans lists the stored plans, newest first.
func (c *Client) Plans(ctx context.Context) (*PlanList, error) {
	var out PlanList
	return &out, c.do(ctx, http.MethodGet, "/api/v2/plans", nil, &out)
}

// Plan reads one plan's record.
func (c *Client) Plan(ctx context.Context, id string) (*PlanResponse, error) {
	var out PlanResponse
	return &out, c.do(ctx, http.MethodGet, "/api/v2/plans/"+url.PathEscape(id), nil, &out)
}

// RequestPlan asks the coordinator to pause, resume or cancel a plan.
func (c *Client) RequestPlan(ctx context.Context, id string, req exec.Request) (*PlanResponse, error) {
	var out PlanResponse
	return &out, c.do(ctx, http.MethodPost, "/api/v2/plans/"+url.PathEscape(id)+"/"+string(req), nil, &out)
}

// do sends one request. Reads move to the next address on any transport
// error; writes only when the connection was never made, so a write is
// never sent twice.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.doWith(c.hc, ctx, method, path, body, out)
}

// doWith is do over hc: a long call (verify) goes without the client's
// per-request timeout, bounded by its context instead.
func (c *Client) doWith(hc *http.Client, ctx context.Context, method, path string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return err
		}
	}
	c.mu.Lock()
	start := c.next
	c.mu.Unlock()
	unreach := &UnreachableError{}
	for i := range c.servers {
		idx := (start + i) % len(c.servers)
		server := c.servers[idx]
		// A read has another agent to ask: one that accepts the
		// connection but does not answer (a stopped process, a stall) is
		// given up on after readAttempt instead of the whole timeout.
		actx, cancel := ctx, context.CancelFunc(func() {})
		if method == http.MethodGet && i < len(c.servers)-1 {
			actx, cancel = context.WithTimeout(ctx, readAttempt)
		}
		req, err := http.NewRequestWithContext(actx, method, server+path, bytes.NewReader(payload))
		if err != nil {
			cancel()
			return err
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			err = decode(resp, out)
			if err != nil && actx.Err() != nil {
				resp = nil // the body did not come in time: as unreachable
			}
		}
		cancel()
		if resp == nil && err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if actx.Err() != nil {
				err = fmt.Errorf("no answer within %s (is the agent stopped or overloaded?)", readAttempt)
			}
			unreach.Tried = append(unreach.Tried, strings.TrimPrefix(server, "http://"))
			unreach.Errs = append(unreach.Errs, err)
			if method != http.MethodGet && !isDialError(err) {
				return fmt.Errorf("%s %s on %s: %w (the request may or may not have been applied; check with a read before retrying)", method, path, server, err)
			}
			continue
		}
		// A read that an agent could not serve (starting, rejoining, cut
		// off from etcd) goes to the next agent; it changed nothing.
		if method == http.MethodGet && IsCode(err, CodeUnavailable) {
			unreach.Tried = append(unreach.Tried, strings.TrimPrefix(server, "http://"))
			unreach.Errs = append(unreach.Errs, err)
			continue
		}
		c.mu.Lock()
		c.next = idx
		c.mu.Unlock()
		return err
	}
	return unreach
}

// readAttempt is how long a read waits for one agent when another is
// left to ask.
const readAttempt = 5 * time.Second

func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func decode(resp *http.Response, out any) error {
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode >= 300 {
		e := &Error{}
		if json.Unmarshal(data, e) != nil || e.Code == "" {
			e = &Error{Code: codeOfStatus(resp.StatusCode), Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))}
			if resp.StatusCode == http.StatusBadRequest && strings.Contains(string(data), "HTTP request to an HTTPS server") {
				// Go's TLS listener answers plain HTTP so, before our
				// handler sees the request.
				e.Message = fmt.Sprintf("%s serves HTTPS (its agents run with TLS), and this request was plain HTTP", resp.Request.URL.Host)
				e.Hint = fmt.Sprintf("use https://%s in --server or CDCCTL_SERVER, with --ca-file (or CDCCTL_CA_FILE) naming the CA that signed its certificate", resp.Request.URL.Host)
			}
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("response is not the expected JSON: %w", err)
	}
	return nil
}
