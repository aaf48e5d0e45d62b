package api

import (
	"context"
	"net/http"
)

// The route a request matched, for metrics: a ServeMux pattern
// ("GET /api/v2/changefeeds/{id}"), never the path itself, so that ids
// do not become label values. A ServeMux sets the pattern on the request
// it is given, and a layer in between may pass a copy on (Authenticate
// does), so the pattern travels back in a holder the outermost layer puts
// in the context.

type routeKey struct{}

// WithRouteHolder returns ctx carrying a holder that RecordRoute fills.
func WithRouteHolder(ctx context.Context, holder *string) context.Context {
	return context.WithValue(ctx, routeKey{}, holder)
}

// RecordRoute serves mux and records the pattern it matched in the
// request's holder, if it has one and no inner mux recorded a pattern
// first (the innermost match is the most specific).
func RecordRoute(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		if h, ok := r.Context().Value(routeKey{}).(*string); ok && *h == "" && r.Pattern != "" {
			*h = r.Pattern
		}
	})
}
