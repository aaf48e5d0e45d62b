// Package registry opens the source a URI names: gen:// (the built-in
// generator) and postgres:// (logical replication). It is the one place
// that knows every source, so the engine, the CLI and verify name a URI
// and see only source's interfaces.
package registry

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/gen"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// schemes lists what Open accepts, for error messages.
const schemes = "gen:// or postgres://"

func scheme(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("source URI: %v; check its syntax (a password with special characters must be percent-encoded)", redacted(err))
	}
	switch u.Scheme {
	case "gen":
		return "gen", nil
	case "postgres", "postgresql":
		return "postgres", nil
	}
	return "", fmt.Errorf("source URI: unknown scheme %q; use %s", u.Scheme, schemes)
}

// redacted keeps url's error from echoing the URI (it may hold a
// password).
func redacted(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// Pinned is a new changefeed's source, fixed for its life.
type Pinned struct {
	// URI is what the changefeed stores.
	URI string
	// Position is a puller's first resume point; nil for sources without
	// one.
	Position source.Position
}

// Pin validates a new changefeed's source URI and fixes what must not
// change over its life (gen: the stream's start; postgres: the slot and
// publication, created now, and the start).
func Pin(ctx context.Context, uri string, cf model.ChangefeedID, now time.Time) (Pinned, error) {
	s, err := scheme(uri)
	if err != nil {
		return Pinned{}, err
	}
	switch s {
	case "postgres":
		u, pos, err := postgres.Pin(ctx, uri, cf, now)
		return Pinned{URI: u, Position: pos}, err
	}
	u, err := gen.Pin(uri, now)
	return Pinned{URI: u}, err
}

// Open opens a pinned source URI for a node.
func Open(ctx context.Context, uri string, env source.Env) (source.Source, error) {
	s, err := scheme(uri)
	if err != nil {
		return nil, err
	}
	switch s {
	case "postgres":
		return postgres.Open(uri, env)
	}
	return gen.Open(uri)
}

// Remove releases what Pin created upstream (postgres: the slot and the
// publication cdcctl named). A source that created nothing does nothing.
func Remove(ctx context.Context, uri string) error {
	s, err := scheme(uri)
	if err != nil {
		return err
	}
	if s == "postgres" {
		return postgres.RemoveURI(ctx, uri)
	}
	return nil
}

// Retable computes, and with apply makes, the change of a changefeed's
// tables (changefeed update): the URI and reader's resume point to store.
// at is the changefeed's checkpoint, where added tables begin. Only
// database sources' tables change; the generator's are fixed.
func Retable(ctx context.Context, uri string, pos source.Position, tables []string, at model.Ts, apply bool) (source.Retabled, error) {
	s, err := scheme(uri)
	if err != nil {
		return source.Retabled{}, err
	}
	if s != "postgres" {
		return source.Retabled{}, fmt.Errorf("the tables of a %s:// changefeed are fixed; changefeed update changes a database source's tables (create another changefeed instead)", s)
	}
	return postgres.Retable(ctx, uri, pos, tables, at, apply)
}

// HoldsUpstream says whether a changefeed of this source keeps something
// upstream that its removal must release (Remove).
func HoldsUpstream(uri string) bool {
	s, err := scheme(uri)
	return err == nil && s == "postgres"
}

// Inspect reports on the upstream side of a changefeed; nil for sources
// with nothing to say (gen).
func Inspect(ctx context.Context, uri string, pos source.Position) (*source.Status, error) {
	s, err := scheme(uri)
	if err != nil || s != "postgres" {
		return nil, err
	}
	return postgres.Inspect(ctx, uri, pos)
}

// Preview says what a new changefeed's source would replicate and what
// it refuses, creating nothing.
func Preview(ctx context.Context, uri string) (source.Followed, error) {
	s, err := scheme(uri)
	if err != nil {
		return source.Followed{}, err
	}
	if s == "postgres" {
		return postgres.Preview(ctx, uri)
	}
	pinned, err := gen.Pin(uri, time.Now())
	if err != nil {
		return source.Followed{}, err
	}
	src, err := gen.Open(pinned)
	if err != nil {
		return source.Followed{}, err
	}
	defer src.Close()
	tables, err := src.Tables(ctx)
	return source.Followed{Tables: tables}, err
}

// Follow is what a changefeed's table rules match now (changefeeds with
// patterns in tables=); ok is false for one without rules.
func Follow(ctx context.Context, uri string, pos source.Position) (source.Followed, bool, error) {
	s, err := scheme(uri)
	if err != nil || s != "postgres" {
		return source.Followed{}, false, err
	}
	return postgres.Follow(ctx, uri, pos)
}

// Upstream reads a database source's tables for verify, and names them;
// nil for sources verify computes instead (gen). A password the API
// redacted is given separately (empty: the URI's own, or PGPASSWORD).
func Upstream(uri, password string) (source.Snapshotter, []string, error) {
	s, err := scheme(uri)
	if err != nil || s != "postgres" {
		return nil, nil, err
	}
	cfg, err := postgres.ParseURI(postgres.WithPassword(uri, password))
	if err != nil {
		return nil, nil, err
	}
	return &postgres.TableReader{ConnString: cfg.ConnString}, cfg.Tables, nil
}

// Redact is a source URI fit for messages and logs.
func Redact(uri string) string {
	if s, err := scheme(uri); err == nil && s == "postgres" {
		return postgres.Redact(uri)
	}
	return redact.URI(uri)
}
