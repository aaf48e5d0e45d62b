package gen

import (
	"context"
	"fmt"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// This file is the generator's side of the source contract
// (source.Source and source.Expectation).

// Pin fixes a gen URI's start to now when it has none, so that every
// node, and verify, read the same stream; the URI comes back in its
// canonical form.
func Pin(uri string, now time.Time) (string, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return "", err
	}
	if cfg.StartMillis == 0 {
		cfg.StartMillis = now.UnixMilli()
	}
	if _, err := New(cfg); err != nil {
		return "", err
	}
	return cfg.URI(), nil
}

// Open parses a pinned gen URI.
func Open(uri string) (*Generator, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// Tables implements source.Source.
func (g *Generator) Tables(context.Context) ([]string, error) { return g.TableNames(), nil }

// Boundaries implements source.Source: the key space is known, so the
// cut is even over the keys.
func (g *Generator) Boundaries(_ context.Context, table string, n int) ([]string, error) {
	if _, ok := g.TableIndex(table); !ok {
		return nil, fmt.Errorf("gen: no table %q", table)
	}
	return g.KeyBoundaries(n), nil
}

// Start implements source.Source: the stream's epoch.
func (g *Generator) Start() model.Ts { return g.TableVersion(0) }

// Resolved implements source.Source: the generator's stream is final up
// to the wall clock.
func (g *Generator) Resolved() model.Ts { return model.TsFromTime(time.Now()) }

// Close implements source.Source; the generator holds nothing.
func (g *Generator) Close() error { return nil }

// Keys implements source.Expectation.
func (g *Generator) Keys() int { return g.cfg.Tables * g.cfg.Keys }

// KeyRef implements source.Expectation.
func (g *Generator) KeyRef(table, key string) (int, bool) {
	ti, ok := g.TableIndex(table)
	if !ok {
		return 0, false
	}
	ki, ok := g.KeyIndex(key)
	if !ok {
		return 0, false
	}
	return ti*g.cfg.Keys + ki, true
}

// KeyOf implements source.Expectation.
func (g *Generator) KeyOf(ref int) (string, string) {
	return TableName(ref / g.cfg.Keys), g.Key(ref % g.cfg.Keys)
}

// Versions implements source.Expectation.
func (g *Generator) Versions(ref int, upTo model.Ts) uint64 {
	return g.CountIndex(ref/g.cfg.Keys, ref%g.cfg.Keys, upTo)
}

// VersionCommitTs implements source.Expectation.
func (g *Generator) VersionCommitTs(ref int, v uint64) model.Ts {
	return g.CommitTs(ref/g.cfg.Keys, ref%g.cfg.Keys, v)
}

// Payload implements source.Expectation: the "value" column of version
// v; a delete shows the row it deleted.
func (g *Generator) Payload(ref int, v uint64) string {
	if g.isDelete(v) {
		v--
	}
	return RowValue(g.cfg.Seed, ref/g.cfg.Keys, ref%g.cfg.Keys, v)
}

// SchemaSince implements source.Expectation.
func (g *Generator) SchemaSince(ts model.Ts) model.Ts {
	s := g.SchemaAt(ts.Millis())
	if s == 0 {
		return 0
	}
	return g.TableVersion(s)
}
