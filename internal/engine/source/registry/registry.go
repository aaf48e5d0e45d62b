// Package registry opens the source a URI names: gen:// (the built-in
// generator), postgres:// (logical replication) and mysql:// (the binary
// log of MySQL or MariaDB). It is the one place
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
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/engine/source/postgres"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// database is what the registry asks of a database source (one whose
// changes a puller reads from the upstream's log), beyond the generator's
// Pin and Open: each is one package's functions, so that adding a
// database is one entry of databases.
type database struct {
	pin     func(ctx context.Context, uri string, cf model.ChangefeedID, now time.Time) (string, source.Position, error)
	open    func(uri string, env source.Env) (source.Source, error)
	remove  func(ctx context.Context, uri string) error
	retable func(ctx context.Context, uri string, pos source.Position, tables []string, at model.Ts, apply bool, again ...string) (source.Retabled, error)
	// resnapshot is nil for a source whose changefeeds cannot lose their
	// position upstream (PostgreSQL's slot keeps its WAL).
	resnapshot func(ctx context.Context, uri string, pos source.Position, at model.Ts) (source.Retabled, error)
	inspect    func(ctx context.Context, uri string, pos source.Position) (*source.Status, error)
	// retention is inspect's log retention alone, without its warnings.
	retention func(ctx context.Context, uri string, pos source.Position) (*source.Status, error)
	// resumable is nil for a source whose readers check their position
	// only when they start.
	resumable func(ctx context.Context, uri string, pos source.Position) error
	// copyWarnings is nil for a source with nothing to say of a copy.
	copyWarnings func(ctx context.Context, uri string, copying map[string]source.CopyingTable) []string
	// keysChanged is nil for a source whose copy goes on when a table's
	// key changes (MySQL's reader holds such a table to copy it again).
	keysChanged func(ctx context.Context, uri string, copying map[string]source.CopyingTable) map[string]string
	preview     func(ctx context.Context, uri string) (source.Followed, error)
	follow      func(ctx context.Context, uri string, pos source.Position) (source.Followed, bool, error)
	upstream    func(uri, password string) (source.Snapshotter, []string, error)
	redact      func(uri string) string
	// claims are what a changefeed of the URI holds upstream (a slot, a
	// server id), equal between two changefeeds that would share it.
	claims func(uri, changefeed string) []string
	// named is a new changefeed's URI naming what pin will hold
	// upstream, for remove.
	named func(uri string, cf model.ChangefeedID) (string, error)
	// own says which of a URI's query parameters are the source's (what
	// the changefeed replicates), the rest being the driver's.
	own func(param string) bool
	// canonical is a URI as the source stores it, or why it cannot read
	// it.
	canonical func(uri string) (string, error)
}

// databases are the database sources by the schemes of their URIs.
var databases = map[string]*database{}

func init() {
	pg := &database{pin: postgres.Pin, remove: postgres.RemoveURI, retable: postgres.Retable,
		inspect: postgres.Inspect, retention: postgres.Retention, resumable: postgres.Resumable, copyWarnings: postgres.CopyWarnings, keysChanged: postgres.KeysChangedWhileCopying, preview: postgres.Preview, follow: postgres.Follow, redact: postgres.Redact, claims: postgres.Claims, named: postgres.Named, own: postgres.Own,
		canonical: func(uri string) (string, error) {
			c, err := postgres.ParseURI(uri)
			return c.URI(), err
		},
		open: func(uri string, env source.Env) (source.Source, error) {
			src, err := postgres.Open(uri, env)
			if err != nil {
				return nil, err
			}
			return src, nil
		},
		upstream: func(uri, password string) (source.Snapshotter, []string, error) {
			cfg, err := postgres.ParseURI(postgres.WithPassword(uri, password))
			if err != nil {
				return nil, nil, err
			}
			return &postgres.TableReader{ConnString: cfg.ConnString}, cfg.Tables, nil
		}}
	databases["postgres"], databases["postgresql"] = pg, pg
	my := &database{pin: mysql.Pin, remove: mysql.RemoveURI, retable: mysql.Retable, resnapshot: mysql.Resnapshot,
		inspect: mysql.Inspect, retention: mysql.Retention, resumable: mysql.Resumable, preview: mysql.Preview, follow: mysql.Follow, redact: mysql.Redact, claims: mysql.Claims, named: mysql.Named, own: mysql.Own,
		canonical: func(uri string) (string, error) {
			c, err := mysql.ParseURI(uri)
			return c.URI(), err
		},
		open: func(uri string, env source.Env) (source.Source, error) {
			src, err := mysql.Open(uri, env)
			if err != nil {
				return nil, err
			}
			return src, nil
		},
		upstream: func(uri, password string) (source.Snapshotter, []string, error) {
			r, tables, err := mysql.NewTableReader(uri, password)
			if err != nil {
				return nil, nil, err
			}
			return r, tables, nil
		}}
	databases["mysql"], databases["mariadb"] = my, my
}

// schemes lists what Open accepts, for error messages.
const schemes = "gen://, postgres:// or mysql://"

// scheme checks a source URI's scheme: its database source, or nil for
// the generator.
func scheme(uri string) (*database, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("source URI: %v; check its syntax (a password with special characters must be percent-encoded)", redacted(err))
	}
	if u.Scheme == "gen" {
		return nil, nil
	}
	if db, ok := databases[u.Scheme]; ok {
		return db, nil
	}
	return nil, fmt.Errorf("source URI: unknown scheme %q; use %s", u.Scheme, schemes)
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
	db, err := scheme(uri)
	if err != nil {
		return Pinned{}, err
	}
	if db != nil {
		u, pos, err := db.pin(ctx, uri, cf, now)
		return Pinned{URI: u, Position: pos}, err
	}
	u, err := gen.Pin(uri, now)
	return Pinned{URI: u}, err
}

// Claims are what a changefeed of a source URI holds upstream (a
// PostgreSQL slot and publication, a MySQL server id), named so that two
// changefeeds that would share one have an equal claim; none for the
// generator or a URI that does not parse (its create is refused anyway).
func Claims(uri string, cf model.ChangefeedID) []string {
	db, err := scheme(uri)
	if err != nil || db == nil || db.claims == nil {
		return nil
	}
	return db.claims(uri, string(cf))
}

// Open opens a pinned source URI for a node.
func Open(ctx context.Context, uri string, env source.Env) (source.Source, error) {
	db, err := scheme(uri)
	if err != nil {
		return nil, err
	}
	if db != nil {
		return db.open(uri, env)
	}
	return gen.Open(uri)
}

// Remove releases what Pin created upstream (postgres: the slot and the
// publication cdcctl named). A source that created nothing does nothing.
func Remove(ctx context.Context, uri string) error {
	db, err := scheme(uri)
	if err != nil || db == nil {
		return err
	}
	return db.remove(ctx, uri)
}

// Retable computes, and with apply makes, the change of a changefeed's
// tables (changefeed update): the URI and reader's resume point to store.
// at is the changefeed's checkpoint, where added tables begin; again are
// tables kept that are copied again from there (as if removed and added
// back in the change). Only database sources' tables change; the
// generator's are fixed.
func Retable(ctx context.Context, uri string, pos source.Position, tables []string, at model.Ts, apply bool, again ...string) (source.Retabled, error) {
	db, err := scheme(uri)
	if err != nil {
		return source.Retabled{}, err
	}
	if db == nil {
		return source.Retabled{}, fmt.Errorf("the tables of a gen:// changefeed are fixed; changefeed update changes a database source's tables (create another changefeed instead)")
	}
	return db.retable(ctx, uri, pos, tables, at, apply, again...)
}

// Resnapshot computes the URI and resume point of a changefeed that
// copies all its tables again from its checkpoint on, reading on from
// where the upstream's log ends now (changefeed resnapshot: its own
// position was lost upstream). Only sources that can lose it have one.
func Resnapshot(ctx context.Context, uri string, pos source.Position, at model.Ts) (source.Retabled, error) {
	if err := Resnapshots(uri); err != nil {
		return source.Retabled{}, err
	}
	db, _ := scheme(uri)
	return db.resnapshot(ctx, uri, pos, at)
}

// Resnapshots refuses a changefeed of uri whose kind of source is never
// re-snapshotted, whatever its state: said before what the changefeed's
// state would ask for (pause it), which would not help.
func Resnapshots(uri string) error {
	db, err := scheme(uri)
	if err != nil {
		return err
	}
	if db == nil {
		return fmt.Errorf("a gen:// changefeed has nothing upstream to copy again")
	}
	if db.resnapshot == nil {
		return fmt.Errorf("a PostgreSQL changefeed is not re-snapshotted: its replication slot keeps the WAL it resumes from (if the slot was lost, remove the changefeed and create it again)")
	}
	return nil
}

// Holding is what a create of changefeed cf from uri records before it
// pins the source (a cleanup's URI, for Remove): "" for a source that
// holds nothing upstream, or nothing cdcctl names (a slot given in the
// URI).
func Holding(uri string, cf model.ChangefeedID) (string, error) {
	db, err := scheme(uri)
	if err != nil || db == nil {
		return "", err
	}
	return db.named(uri, cf)
}

// HoldsUpstream says whether a changefeed of this source keeps something
// upstream that its removal must release (Remove).
func HoldsUpstream(uri string) bool {
	db, err := scheme(uri)
	return err == nil && db != nil
}

// Inspect reports on the upstream side of a changefeed; nil for sources
// with nothing to say (gen).
func Inspect(ctx context.Context, uri string, pos source.Position) (*source.Status, error) {
	db, err := scheme(uri)
	if err != nil || db == nil {
		return nil, err
	}
	return db.inspect(ctx, uri, pos)
}

// Retention reports how much upstream log a changefeed at pos holds and
// how long the upstream keeps it: Inspect without the warnings, whose
// catalog reads a periodic caller would repeat for nothing. Nil for
// sources that keep no log (gen).
func Retention(ctx context.Context, uri string, pos source.Position) (*source.Status, error) {
	db, err := scheme(uri)
	if err != nil || db == nil {
		return nil, err
	}
	return db.retention(ctx, uri, pos)
}

// Resumable says whether the upstream at uri can go on from the resume
// point pos (nil where the source cannot tell before its reader starts):
// an update's check of a changefeed's new connection, and a resume's of
// a stopped changefeed. An error wrapping source.ErrUnresumable says it
// cannot, whatever is tried again.
func Resumable(ctx context.Context, uri string, pos source.Position) error {
	db, err := scheme(uri)
	if err != nil || db == nil || db.resumable == nil {
		return err
	}
	return db.resumable(ctx, uri, pos)
}

// CopyingTable is a table still copying, as CopyWarnings is told of it.
type CopyingTable = source.CopyingTable

// CopyWarnings says what slows or stops the initial snapshot of the
// tables still copying (copying: each with the key its partitions were
// cut on and copy by, where known) and what to do, where the source can
// tell; nothing for the others.
func CopyWarnings(ctx context.Context, uri string, copying map[string]source.CopyingTable) []string {
	db, err := scheme(uri)
	if err != nil || db == nil || db.copyWarnings == nil || len(copying) == 0 {
		return nil
	}
	return db.copyWarnings(ctx, uri, copying)
}

// KeysChangedWhileCopying says, of the tables still copying, which
// cannot copy on because their primary key changed (table: why): their
// remedy is a new copy under the new key, which the coordinator makes
// where the source URI lets it (auto-remedy).
func KeysChangedWhileCopying(ctx context.Context, uri string, copying map[string]source.CopyingTable) map[string]string {
	db, err := scheme(uri)
	if err != nil || db == nil || db.keysChanged == nil || len(copying) == 0 {
		return nil
	}
	return db.keysChanged(ctx, uri, copying)
}

// Preview says what a new changefeed's source would replicate and what
// it refuses, creating nothing.
func Preview(ctx context.Context, uri string) (source.Followed, error) {
	db, err := scheme(uri)
	if err != nil {
		return source.Followed{}, err
	}
	if db != nil {
		return db.preview(ctx, uri)
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
	db, err := scheme(uri)
	if err != nil || db == nil {
		return source.Followed{}, false, err
	}
	return db.follow(ctx, uri, pos)
}

// Upstream reads a database source's tables for verify, and names them;
// nil for sources verify computes instead (gen). A password the API
// redacted is given separately (empty: the URI's own, or the database's
// own environment variable).
func Upstream(uri, password string) (source.Snapshotter, []string, error) {
	db, err := scheme(uri)
	if err != nil || db == nil {
		return nil, nil, err
	}
	return db.upstream(uri, password)
}

// Reconnect is a changefeed's stored source URI with the connection of
// given (user, password, address, the driver's connection parameters),
// what the changefeed replicates unchanged; and one line per change, no
// secret in them. The generator has no connection.
func Reconnect(stored, given string) (string, []string, error) {
	db, err := scheme(stored)
	if err != nil {
		return "", nil, err
	}
	if db == nil {
		return "", nil, fmt.Errorf("--source: a gen:// changefeed has no connection to change")
	}
	uri, changes, err := reconnect(stored, given, db.own, db.canonical)
	if err != nil {
		return "", nil, err
	}
	if _, err := db.canonical(uri); err != nil {
		return "", nil, err
	}
	return uri, changes, nil
}

// Redact is a source URI fit for messages and logs.
func Redact(uri string) string {
	if db, err := scheme(uri); err == nil && db != nil {
		return db.redact(uri)
	}
	return redact.URI(uri)
}
