// Package postgres is the PostgreSQL source: logical replication through
// one slot and one publication per changefeed, decoded from pgoutput into
// the row-change model of package source (typed columns, insert, update,
// delete, old rows, schema versions from Relation messages).
//
// It imports model and source; the engine reaches it only through
// source/registry.
package postgres

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// Config is a postgres:// source URI's meaning.
type Config struct {
	// timeline is the resume point's (position.Timeline) for the checks
	// of a stream's start; 0 when not known.
	timeline int32
	// ConnString is the URI without this package's parameters: what pgx
	// connects with (user, password, host, port, database, sslmode, ...).
	ConnString string
	// Tables are the replicated tables, "schema.table", in the order
	// given; a name without a schema is in public. With a Filter, they
	// are what it matched when the changefeed was created or last
	// followed it (filter.go).
	Tables []string
	// Filter are tables= given with patterns: "schema.table" globs
	// (public.*, sales.order_?) and exclusions (!public.audit). The
	// changefeed replicates every table they match, and follows them as
	// tables come and go.
	Filter []string
	// Publication and Slot name the upstream objects; empty means the
	// default named after the changefeed.
	Publication string
	Slot        string
	// Start is the changefeed's first position, fixed when it is created
	// (start=).
	Start model.Ts
	// Snapshot is "initial" (the default: existing rows are copied first)
	// or "never" (only changes after the changefeed's creation).
	Snapshot string
	// AutoRemedy says a table held by a change upstream gets the remedy
	// its hold names by itself (auto-remedy=, true by default): a rename
	// followed under the new name where no table has taken the old one,
	// a table whose key changed or that was replaced copied again (the
	// coordinator copies it again); false holds it until the
	// operator updates the changefeed. Tables matched by rules follow
	// the rules instead.
	AutoRemedy bool
	// ChunkRows bounds the rows of one chunk of the snapshot (chunk-rows=,
	// Debezium's incremental.snapshot.chunk.size); 0 is the default.
	ChunkRows int
	// SnapshotRate bounds the rows the initial snapshot reads a second on
	// each node (snapshot-rate=; source.Pace); 0: no bound.
	SnapshotRate int
	// TimeZone is the zone every session of the source writes a
	// timestamptz in (timezone=; UTC unless the operator names another
	// when the changefeed is created); empty for a changefeed stored
	// before the source fixed it: the server's own setting, as then
	// (session.go).
	TimeZone string
	// CatalogInterval is how often the reader looks at the catalog for
	// what pgoutput never says (catalog-interval=): a table dropped, one
	// renamed away and left idle, a partition attached with rows, the
	// columns of a table changed and not written since. 0 is the
	// default, dropCheckEvery.
	CatalogInterval time.Duration

	// pinned are the session settings ParseURI put into ConnString (not
	// the operator's): URI leaves them out.
	pinned []string
}

// ours are the query parameters this package reads; every other one is
// the driver's (sslmode, connect_timeout, ...).
var ours = map[string]bool{"tables": true, "filter": true, "publication": true, "slot": true, "start": true, "snapshot": true, "chunk-rows": true, "snapshot-rate": true, "timezone": true, "auto-remedy": true, "catalog-interval": true}

var identPattern = regexp.MustCompile(`^[a-z_][a-z0-9_$]{0,62}$`)

// ParseURI parses postgres://user[:password]@host:port/db?tables=s.t1,s.t2&publication=NAME&slot=NAME&sslmode=...
func ParseURI(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("source URI: %v", redactErr(err, raw))
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return Config{}, fmt.Errorf("source URI %s: scheme must be postgres://", Redact(raw))
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("source URI %s: name the server, e.g. postgres://user@127.0.0.1:5432/db?tables=public.orders", Redact(raw))
	}
	if strings.Trim(u.Path, "/") == "" {
		return Config{}, fmt.Errorf("source URI %s: name the database in the path, e.g. postgres://user@host:5432/shop?tables=public.orders", Redact(raw))
	}
	q := u.Query()
	var c Config
	for k, vs := range q {
		if ours[k] && len(vs) != 1 {
			return Config{}, fmt.Errorf("source URI: parameter %q given %d times", k, len(vs))
		}
	}
	tables := model.SplitTableList(q.Get("tables"))
	switch {
	case !q.Has("tables") && !q.Has("filter"):
		// No tables named: every table the user may read (allTables).
		c.Filter = []string{allTables}
	case q.Has("filter"):
		// A stored URI: the filter, and what it matched.
		if c.Filter, err = ParseFilter(model.SplitTableList(q.Get("filter"))); err != nil {
			return Config{}, fmt.Errorf("source URI: %w", err)
		}
		if c.Tables, err = ParseTables(tables); err != nil {
			return Config{}, fmt.Errorf("source URI: %w", err)
		}
	case isFilter(tables):
		if c.Filter, err = ParseFilter(tables); err != nil {
			return Config{}, fmt.Errorf("source URI: %w", err)
		}
	default:
		if c.Tables, err = ParseTables(tables); err != nil {
			return Config{}, fmt.Errorf("source URI: %w", err)
		}
	}
	if len(c.Tables) == 0 && len(c.Filter) == 0 {
		return Config{}, fmt.Errorf("source URI %s: name the tables to replicate, e.g. ?tables=public.orders,public.customers", Redact(raw))
	}
	c.Publication, c.Slot = q.Get("publication"), q.Get("slot")
	for name, v := range map[string]string{"publication": c.Publication, "slot": c.Slot} {
		if v != "" && !identPattern.MatchString(v) {
			return Config{}, fmt.Errorf("source URI: %s=%q: use 1-63 lowercase letters, digits and '_'", name, v)
		}
	}
	switch c.Snapshot = q.Get("snapshot"); c.Snapshot {
	case "":
		c.Snapshot = "initial"
	case "initial", "never":
	default:
		return Config{}, fmt.Errorf("source URI: snapshot=%q: use initial (copy the existing rows first, the default) or never (only changes from now on)", c.Snapshot)
	}
	c.AutoRemedy = true
	if v := q.Get("auto-remedy"); v != "" {
		if c.AutoRemedy, err = strconv.ParseBool(v); err != nil {
			return Config{}, fmt.Errorf("source URI: auto-remedy=%q: use true (a table held by a change upstream gets its remedy by itself: a rename is followed under the new name, a table whose key changed or that was replaced is copied again; the default) or false (held until you update the changefeed)", v)
		}
	}
	if v := q.Get("chunk-rows"); v != "" {
		if c.ChunkRows, err = source.ParseChunkRows(v); err != nil {
			return Config{}, err
		}
	}
	if q.Has("snapshot-rate") {
		// Given empty (a script's unset variable) is refused, not read
		// as no bound.
		if c.SnapshotRate, err = source.ParseSnapshotRate(q.Get("snapshot-rate")); err != nil {
			return Config{}, err
		}
	}
	if v := q.Get("catalog-interval"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond || d > time.Hour {
			return Config{}, fmt.Errorf("source URI: catalog-interval=%q: give how often the reader looks at the catalog for tables dropped or renamed away, partitions attached and columns changed on tables not written since, a duration from 100ms to 1h (default %s)", v, dropCheckEvery)
		}
		c.CatalogInterval = d
	}
	if v := q.Get("start"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return Config{}, fmt.Errorf("source URI: start=%q: must be a position (set by cdcctl when the changefeed is created)", v)
		}
		c.Start = model.Ts(n)
	}
	if err := c.pinSession(q); err != nil {
		return Config{}, err
	}
	u.RawQuery = q.Encode()
	c.ConnString = u.String()
	return c, nil
}

// ParseTables reads table names as tables= gives them: "schema.table",
// or "table" in public, a name with capitals or other characters in
// double quotes (public."Orders"); empty names are skipped, and a name
// given twice is refused. It returns the names as model.TableName writes
// them.
func ParseTables(names []string) ([]string, error) {
	var out []string
	for _, t := range names {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		schema, table, err := model.ParseTableName(t)
		if err != nil {
			return nil, err
		}
		if schema == "" {
			schema = "public"
		}
		if why := unfit(schema, table); why != "" {
			return nil, fmt.Errorf("table %s: %s", model.TableName(schema, table), why)
		}
		out = append(out, model.TableName(schema, table))
	}
	if dup := firstDuplicate(out); dup != "" {
		return nil, fmt.Errorf("table %s is named twice", dup)
	}
	return out, nil
}

// WithNames fills the publication and slot names a changefeed gets by
// default: cdcctl_<changefeed>.
func (c Config) WithNames(changefeed string) Config {
	def := "cdcctl_" + strings.ReplaceAll(changefeed, "-", "_")
	if len(def) > 63 {
		def = def[:63]
	}
	if c.Publication == "" {
		c.Publication = def
	}
	if c.Slot == "" {
		c.Slot = def
	}
	return c
}

// Claims are what a changefeed of this URI holds upstream, named so that
// two changefeeds' claims are equal when they would share it: its slot
// and its publication in one database (derived from the changefeed's
// name unless the URI names them). Two changefeeds sharing a slot skip
// each other's changes, and removing one drops the other's.
func Claims(uri string, changefeed string) []string {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil
	}
	cfg = cfg.WithNames(changefeed)
	u, err := url.Parse(cfg.ConnString)
	if err != nil {
		return nil
	}
	where := strings.ToLower(u.Host) + "/" + strings.TrimPrefix(u.Path, "/")
	if h := u.Query().Get("host"); h != "" {
		where = strings.ToLower(h) + ":" + u.Query().Get("port") + "/" + strings.TrimPrefix(u.Path, "/")
	}
	return []string{"replication slot " + cfg.Slot + " in " + where, "publication " + cfg.Publication + " in " + where}
}

// URI renders the config back; ParseURI(c.URI()) == c.
func (c Config) URI() string {
	u, _ := url.Parse(c.ConnString)
	q := u.Query()
	q.Set("tables", strings.Join(c.Tables, ","))
	if len(c.Filter) > 0 {
		q.Set("filter", strings.Join(c.Filter, ","))
	}
	if c.Publication != "" {
		q.Set("publication", c.Publication)
	}
	if c.Slot != "" {
		q.Set("slot", c.Slot)
	}
	if c.Start != 0 {
		q.Set("start", strconv.FormatUint(uint64(c.Start), 10))
	}
	if c.Snapshot != "" && c.Snapshot != "initial" {
		q.Set("snapshot", c.Snapshot)
	}
	if c.ChunkRows != 0 {
		q.Set("chunk-rows", strconv.Itoa(c.ChunkRows))
	}
	if c.SnapshotRate != 0 {
		q.Set("snapshot-rate", strconv.Itoa(c.SnapshotRate))
	}
	if !c.AutoRemedy {
		q.Set("auto-remedy", "false")
	}
	if c.CatalogInterval != 0 {
		q.Set("catalog-interval", c.CatalogInterval.String())
	}
	for _, k := range c.pinned {
		q.Del(k)
	}
	if c.TimeZone != "" {
		q.Set(zoneParam, c.TimeZone) // ours and the driver's name alike
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Redact is a source URI fit for messages and logs: the password masked,
// in the user info and in the query (password=, sslpassword=, which the
// driver takes too).
func Redact(raw string) string { return redact.URI(raw) }

// WithPassword puts a password into a URI, replacing the one Redact
// masked; an empty password removes a masked one (the driver then uses
// PGPASSWORD or ~/.pgpass).
func WithPassword(raw, password string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	switch p, has := u.User.Password(); {
	case password != "":
		u.User = url.UserPassword(u.User.Username(), password)
	case has && p == "xxxxx":
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// redactErr keeps a parse error from echoing a password.
func redactErr(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr == nil {
		if p, has := u.User.Password(); has && p != "" {
			return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), p, "xxxxx"))
		}
	}
	if strings.Contains(raw, "@") {
		return fmt.Errorf("the URI does not parse (check that special characters in the password are percent-encoded)")
	}
	return err
}

func firstDuplicate(xs []string) string {
	s := append([]string(nil), xs...)
	sort.Strings(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			return s[i]
		}
	}
	return ""
}

// unfit says why a schema and table name cannot be replicated, "" when
// they can: each is a directory of a storage sink (<schema>/<table>/...),
// so neither may hold a slash or be "." or "..".
func unfit(schema, table string) string {
	for _, n := range []string{schema, table} {
		if strings.ContainsRune(n, '/') || n == "." || n == ".." {
			return fmt.Sprintf("the name %q cannot be a storage sink's directory (it holds a slash or is . or ..): rename it upstream, or leave it out", n)
		}
	}
	return ""
}

// Own says whether a source URI's query parameter is the changefeed's
// for life, not how to connect (sslmode, connect_timeout, ...): this
// package's, the database (dbname=, which pgx takes over the path), and
// the session settings that make the text of values, keys included
// (sessionPins, the time zone; options= may set any), in any case.
func Own(param string) bool {
	k := strings.ToLower(param)
	if ours[k] || k == "dbname" || k == "database" || k == "options" {
		return true
	}
	for _, p := range sessionPins {
		if strings.EqualFold(p.name, param) {
			return true
		}
	}
	return false
}
