// Package registry opens the source a URI names: gen:// (the built-in
// generator). It is the one place that knows every source, so the engine,
// the CLI and verify name a URI and see only source's interfaces.
package registry

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
)

// schemes lists what Open accepts, for error messages.
const schemes = "gen://"

func scheme(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("source URI %q: %v", uri, err)
	}
	switch u.Scheme {
	case "gen":
		return u.Scheme, nil
	}
	return "", fmt.Errorf("source URI %q: unknown scheme %q; use %s", uri, u.Scheme, schemes)
}

// Pin validates a new changefeed's source URI and fixes what must not
// change over its life (gen: the stream's start), returning the URI to
// store with the changefeed.
func Pin(ctx context.Context, uri string, now time.Time) (string, error) {
	s, err := scheme(uri)
	if err != nil {
		return "", err
	}
	switch s {
	case "gen":
		return gen.Pin(uri, now)
	}
	panic("unreachable")
}

// Open opens a pinned source URI.
func Open(ctx context.Context, uri string) (source.Source, error) {
	s, err := scheme(uri)
	if err != nil {
		return nil, err
	}
	switch s {
	case "gen":
		return gen.Open(uri)
	}
	panic("unreachable")
}
