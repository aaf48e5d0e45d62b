package agent

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcctl/cdcctl/internal/api"
)

// httpMetrics count the API's requests by route (the ServeMux pattern,
// never the path: ids are not label values), method (HTTP's own, else
// "other") and status code, and time them by route. No label takes a
// value a caller chose.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg *prometheus.Registry) *httpMetrics {
	hm := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests this agent answered, by route (the API's pattern, or \"other\" for paths it does not serve), method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "cdcctl", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route (streams such as plan events last as long as they are followed).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"route"}),
	}
	reg.MustRegister(hm.requests, hm.duration)
	return hm
}

// observe counts every request next answers.
func (hm *httpMetrics) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		var route string
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(api.WithRouteHolder(r.Context(), &route)))
		if route == "" || sw.code == http.StatusUnauthorized {
			// No series of its own for what a caller without a token
			// asks: every label here is from a small, fixed set.
			route = "other"
		}
		hm.requests.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(sw.code)).Inc()
		hm.duration.WithLabelValues(route).Observe(time.Since(began).Seconds())
	})
}

// methodLabel is a request's method as a label value: one of HTTP's own,
// else "other". The method is whatever the caller sent (any token
// character, any length); as a label, each new one would be a series
// kept for ever.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// statusWriter remembers the status code a handler wrote; it passes
// Flush on, for the event streams.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// transportMetrics count the node-to-node messages by topic (a handful:
// heartbeat, recover-answer, the event log's reads), direction and
// outcome, and their bytes.
type transportMetrics struct {
	messages *prometheus.CounterVec
	bytes    *prometheus.CounterVec
}

func newTransportMetrics(reg *prometheus.Registry) *transportMetrics {
	tm := &transportMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "transport", Name: "messages_total",
			Help: "Node-to-node messages (gRPC) by topic, direction (sent, received) and result (ok, error).",
		}, []string{"topic", "direction", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cdcctl", Subsystem: "transport", Name: "message_bytes_total",
			Help: "Bytes of node-to-node message bodies by topic and direction.",
		}, []string{"topic", "direction"}),
	}
	reg.MustRegister(tm.messages, tm.bytes)
	return tm
}

func (tm *transportMetrics) count(topic, direction string, bytes int, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	tm.messages.WithLabelValues(topic, direction, result).Inc()
	tm.bytes.WithLabelValues(topic, direction).Add(float64(bytes))
}

func (tm *transportMetrics) Sent(topic string, bytes int, err error) {
	tm.count(topic, "sent", bytes, err)
}

func (tm *transportMetrics) Received(topic string, bytes int, err error) {
	tm.count(topic, "received", bytes, err)
}
