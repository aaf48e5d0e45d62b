package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// onCoordinator runs a write on the coordinator: here if this node is it,
// otherwise forwarded there (seed 000's component diagram). While
// leadership moves, a node's view may lag by a moment, so a forward that
// lands on a former coordinator is looked up and sent again.
func (s *server) onCoordinator(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			writeError(w, Errorf(CodeBadRequest, "", "could not read the request body: %v", err))
			return
		}
		if len(body) > maxBody {
			writeError(w, tooLarge())
			return
		}
		forwardedBy := r.Header.Get(ForwardedHeader)
		began := time.Now()
		for attempt := 0; ; attempt++ {
			// A hand-over gets up to 3 s to become visible.
			self, addr, ok := s.b.Coordinator(r.Context(), 3*time.Second)
			if self {
				r.Body = io.NopCloser(bytes.NewReader(body))
				h(w, r)
				return
			}
			if !ok {
				if r.Context().Err() == nil && time.Since(began) < maxForwardWait && attempt > 0 {
					// The coordinator this write was on its way to died;
					// its successor is being elected.
					continue
				}
				writeError(w, Errorf(CodeNoCoordinator, "wait until one is elected ('cdcctl cluster wait') and try again", "no coordinator is elected right now"))
				return
			}
			if forwardedBy != "" {
				// Forward once only: the sender looks again and retries.
				writeError(w, Errorf(CodeNotCoordinator, "the coordinator is changing; try again in a moment", "request forwarded by %s reached %s, which is not the coordinator", forwardedBy, s.self))
				return
			}
			resp, err := s.forward(r, addr, body)
			if err != nil {
				// A coordinator that cannot be dialled never saw the
				// write: it has likely died, and stays in the view until
				// its lease runs out. Look again until another is elected
				// (the caller's timeout bounds the wait). Any other error
				// may have delivered it: say so rather than send it twice.
				if isDialError(err) && r.Context().Err() == nil && time.Since(began) < maxForwardWait {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				writeError(w, Errorf(CodeUnavailable, "the coordinator may be failing over; try again in a few seconds", "could not forward to the coordinator at %s: %v", addr, err))
				return
			}
			if resp.StatusCode == http.StatusServiceUnavailable && attempt < 20 {
				data, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
				resp.Body.Close()
				var e Error
				if json.Unmarshal(data, &e) == nil && e.Code == CodeNotCoordinator {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				resp.Body = io.NopCloser(bytes.NewReader(data))
			}
			copyResponse(w, resp)
			return
		}
	}
}

// maxForwardWait bounds how long a write waits for a dead coordinator to
// be replaced: longer than a default session TTL (10s) plus an election,
// shorter than cdcctl's default request timeout (30s), so the caller
// hears why.
const maxForwardWait = 20 * time.Second

func (s *server) forward(r *http.Request, addr string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, s.scheme+"://"+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if a := r.Header.Get("Authorization"); a != "" {
		// The coordinator checks the caller's token again.
		req.Header.Set("Authorization", a)
	}
	req.Header.Set(ForwardedHeader, s.self)
	return s.client.Do(req)
}

func copyResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if resp.StatusCode >= 400 {
		// An error leaves this agent masked too, whichever agent wrote
		// it (one of another version may not mask).
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		var e Error
		if json.Unmarshal(data, &e) != nil || e.Code == "" {
			e = Error{Code: codeOfStatus(resp.StatusCode), Message: strings.TrimSpace(string(data))}
		}
		w.Header().Del("Content-Length")
		writeJSON(w, resp.StatusCode, Redacted(&e))
		return
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
