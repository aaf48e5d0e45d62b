// Package mysql is the MySQL and MariaDB source: row changes read from
// the server's binary log (one binlog connection per changefeed, through
// go-mysql's replication package, which only parses: rows are decoded
// here, with the schema this package keeps, never the live one).
//
// It holds the source URI (config.go), the preflight checks a
// changefeed's creation runs against the server (preflight.go), the
// catalog read of the replicated tables (catalog.go), the source the
// registry opens (source.go), the binary log reader (stream.go), schema
// changes followed at the next row (schema.go), the initial snapshot's
// chunks (snapshot.go: source.CopyReader's watermarks as signal-table
// rows) and verify's exact cut (cut.go). docs/mysql.md says what is done
// and what is left.
//
// Of this module it imports model, source and redact only.
package mysql

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// Config is a mysql:// source URI's meaning.
type Config struct {
	User, Password string
	// Host and Port are the server's (port 3306 when not given).
	Host string
	Port int
	// Database is the URI's path: tables named without a database are in
	// it.
	Database string
	// Tables are the replicated tables, "database.table" as
	// model.TableName writes them, in the order given. With Filter, they
	// are what its rules matched when it was last followed.
	Tables []string
	// Filter are tables= given with patterns (rules.go), stored as
	// filter=: the changefeed follows them as tables come and go.
	Filter []string
	// ServerID is the id the binlog connection registers under
	// (server-id=); it must differ from every server's and every other
	// replica's. 0: derived from the changefeed when it is created.
	ServerID uint32
	// Start is the changefeed's first position, fixed when it is created
	// (start=).
	Start model.Ts
	// Snapshot is "initial" (the default: existing rows are copied first)
	// or "never" (only changes after the changefeed's creation).
	Snapshot string
	// ChunkRows bounds the rows of one chunk of the initial snapshot
	// (chunk-rows=); 0 is the default.
	ChunkRows int
	// SnapshotRate bounds the rows the initial snapshot reads a second on
	// each node (snapshot-rate=; source.Pace); 0: no bound.
	SnapshotRate int
	// AutoRemedy says a table held by a change upstream gets the remedy
	// its hold names by itself (auto-remedy=, true by default): a rename
	// followed under the new name where no table has taken the old one,
	// a table whose key changed or that was replaced copied again (the
	// coordinator copies it again); false holds it until the
	// operator updates the changefeed.
	AutoRemedy bool
}

// ParseURI parses mysql://user[:password]@host[:port]/db?tables=db.t1,t2&server-id=N.
// A password not in the URI is taken from MYSQL_PWD, as the mysql client
// does. mariadb:// is the same.
func ParseURI(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("source URI: %v; check its syntax (a password with special characters must be percent-encoded)", redact.ParseError(err))
	}
	if u.Scheme != "mysql" && u.Scheme != "mariadb" {
		return Config{}, fmt.Errorf("source URI %s: scheme must be mysql:// (or mariadb://)", Redact(raw))
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("source URI %s: name the server, e.g. mysql://cdc@127.0.0.1:3306/shop?tables=shop.orders", Redact(raw))
	}
	c := Config{Host: u.Hostname(), Port: 3306, Database: strings.Trim(u.Path, "/")}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Config{}, fmt.Errorf("source URI %s: port %q is not a port number", Redact(raw), p)
		}
		c.Port = n
	}
	if c.Database == "" || strings.Contains(c.Database, "/") {
		return Config{}, fmt.Errorf("source URI %s: name one database in the path, e.g. mysql://cdc@host:3306/shop?tables=orders", Redact(raw))
	}
	if u.User != nil {
		c.User = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	if c.User == "" {
		return Config{}, fmt.Errorf("source URI %s: name the user, e.g. mysql://cdc@host:3306/shop (it needs REPLICATION SLAVE, REPLICATION CLIENT and SELECT; docs/mysql.md)", Redact(raw))
	}
	if c.Password == "" {
		c.Password = os.Getenv("MYSQL_PWD")
	}
	q := u.Query()
	for k, vs := range q {
		if !ours[k] {
			return Config{}, fmt.Errorf("source URI: unknown parameter %q; use %s", k, strings.Join(ourNames(), ", "))
		}
		if len(vs) != 1 {
			return Config{}, fmt.Errorf("source URI: parameter %q given %d times", k, len(vs))
		}
	}
	tables := model.SplitTableList(q.Get("tables"))
	switch {
	case q.Has("filter"):
		// A stored URI: the rules, and what they matched.
		if c.Filter, err = ParseRules(c.Database, model.SplitTableList(q.Get("filter"))); err != nil {
			return Config{}, fmt.Errorf("source URI: %w", err)
		}
		if c.Tables, err = ParseTables(c.Database, tables); err != nil {
			return Config{}, fmt.Errorf("source URI: %w", err)
		}
	case isRules(tables):
		if c.Filter, err = ParseRules(c.Database, tables); err != nil {
			return Config{}, fmt.Errorf("source URI: %w", err)
		}
	default:
		if c.Tables, err = ParseTables(c.Database, tables); err != nil {
			return Config{}, fmt.Errorf("source URI: %w", err)
		}
	}
	if len(c.Tables) == 0 && len(c.Filter) == 0 {
		return Config{}, fmt.Errorf("source URI %s: name the tables to replicate, e.g. ?tables=%s.orders,%s.customers", Redact(raw), c.Database, c.Database)
	}
	if v := q.Get("server-id"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return Config{}, fmt.Errorf("source URI: server-id=%q: give a number from 1 to 4294967295 that no server or other replica uses", v)
		}
		c.ServerID = uint32(n)
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
	if v := q.Get("start"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return Config{}, fmt.Errorf("source URI: start=%q: must be a position (set by cdcctl when the changefeed is created)", v)
		}
		c.Start = model.Ts(n)
	}
	return c, nil
}

// ours are the query parameters a mysql:// URI takes.
var ours = map[string]bool{"tables": true, "filter": true, "server-id": true, "snapshot": true, "chunk-rows": true, "snapshot-rate": true, "start": true, "auto-remedy": true}

func ourNames() []string {
	var out []string
	for k := range ours {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ParseTables reads table names as tables= gives them: "database.table",
// or "table" in the URI's database; a name with capitals or other
// characters in double quotes (shop."Orders"). A name given twice is
// refused. It returns the names as model.TableName writes them.
func ParseTables(database string, names []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, t := range names {
		db, table, err := model.ParseTableName(strings.TrimSpace(t))
		if err != nil {
			return nil, err
		}
		if db == "" {
			db = database
		}
		for _, n := range []string{db, table} {
			if strings.ContainsRune(n, '/') || n == "." || n == ".." {
				return nil, fmt.Errorf("table %s: the name %q cannot be a storage sink's directory (it holds a slash or is . or ..): rename it upstream, or leave it out", model.TableName(db, table), n)
			}
		}
		name := model.TableName(db, table)
		if seen[name] {
			return nil, fmt.Errorf("table %s is named twice", name)
		}
		seen[name] = true
		out = append(out, name)
	}
	return out, nil
}

// DSN is what go-sql-driver/mysql connects with: the text protocol (rows
// as the server writes them), in UTC. The binary log holds a TIMESTAMP as
// seconds since 1970, which the reader writes in UTC; a SELECT writes it
// in the session's time_zone, the server's by default (SYSTEM, often
// local time): the snapshot, verify and the stream would write the same
// row in different texts, and a row keyed by a TIMESTAMP under two keys.
// A DATETIME is written as stored, whatever the zone.
func (c Config) DSN() string {
	user := c.User
	if c.Password != "" {
		user += ":" + c.Password
	}
	return fmt.Sprintf("%s@tcp(%s)/%s?interpolateParams=false&timeout=10s&readTimeout=60s&writeTimeout=60s&time_zone=%%27%%2B00%%3A00%%27", user, c.Addr(), url.PathEscape(c.Database))
}

// Addr is host:port.
func (c Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// URI renders the config back, with the password (a stored URI's is
// kept apart by the API; Redact masks it); ParseURI(c.URI()) == c.
func (c Config) URI() string {
	u := url.URL{Scheme: "mysql", Host: c.Addr(), Path: "/" + c.Database}
	switch {
	case c.Password != "":
		u.User = url.UserPassword(c.User, c.Password)
	default:
		u.User = url.User(c.User)
	}
	q := url.Values{}
	q.Set("tables", strings.Join(c.Tables, ","))
	if len(c.Filter) > 0 {
		q.Set("filter", strings.Join(c.Filter, ","))
	}
	if c.ServerID != 0 {
		q.Set("server-id", strconv.FormatUint(uint64(c.ServerID), 10))
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
	if c.Start != 0 {
		q.Set("start", strconv.FormatUint(uint64(c.Start), 10))
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Redact is a source URI fit for messages and logs: the password masked.
func Redact(raw string) string { return redact.URI(raw) }

// Own says whether a source URI's query parameter is this package's;
// a mysql:// URI has no other (its connection is its user, password and
// address).
func Own(param string) bool { return ours[param] }
