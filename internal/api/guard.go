package api

import (
	"fmt"
	"net/http"
	"path"
	"strings"
)

// Guards a request meets before a route: a clean path, headers within
// bounds, a method some route of its path accepts. Each answers in the
// API's error model, where Go's server or mux would answer bare.

// CanonicalPaths answers a path that is not in its clean form (double
// slashes, dot segments) with the JSON error model, where the mux would
// redirect with a bare 301 or 307 that a client following it might send
// to another path than it meant.
func CanonicalPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		clean := path.Clean(p)
		if strings.HasSuffix(p, "/") && strings.HasPrefix(p, "/debug/") {
			clean += "/" // the profiler's index; API paths never end in one
		}
		if p != clean {
			writeError(w, Errorf(CodeNotFound, "use the path "+clean, "no such endpoint: %s %s (not a clean path)", r.Method, p))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// MaxHeaderBytes bounds a request's headers. Past it the API answers 431
// in its error model; Go's server answers a bare 431 on its own only past
// its own, larger limit (ServerMaxHeaderBytes), which the agent sets.
const (
	MaxHeaderBytes       = 64 << 10
	ServerMaxHeaderBytes = 1 << 20
)

// HeaderLimit answers a request whose headers are over MaxHeaderBytes
// with 431 in the error model.
func HeaderLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if n > MaxHeaderBytes {
			writeError(w, Errorf(CodeHeadersTooLarge, fmt.Sprintf("send fewer or shorter headers (at most %d bytes); the API needs none but Content-Type and Authorization", MaxHeaderBytes),
				"request headers are %d bytes, over the limit", n))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowedMethods lists the methods some route accepts for r's path; the
// catch-all route would otherwise answer a wrong method with 404.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "/api/" && pattern != "" {
			out = append(out, m)
		}
	}
	return out
}
