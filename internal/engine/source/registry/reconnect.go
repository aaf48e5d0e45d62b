package registry

// A database changefeed's source URI fixes what it replicates (the
// database, the tables, the slot or server id, the snapshot) and says how
// to reach the server (the user, the password, the address, the driver's
// connection parameters). The first is the changefeed's for life; the
// second changes with the upstream: a password rotated, a primary that
// failed over to a new address, TLS turned on. reconnect is that change,
// the same for every database source (each names its own parameters).

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/redact"
)

// reconnect is a changefeed's stored source URI with the connection of
// given, a URI as an operator types it for create: its user, password,
// host and port, and its query parameters that are not the source's own
// (own says which are: the rest are the driver's). A password given as
// redact.Mask (what 'changefeed get' shows) keeps the stored one; none
// leaves it to the agents' environment. The database, and every
// parameter of the source's own, stay the stored URI's: given may leave
// them out, or repeat them unchanged; tables change with an update of
// the tables. Changes are one line each, no secret in them; none when
// given changes nothing.
func reconnect(stored, given string, own func(param string) bool) (uri string, changes []string, err error) {
	was, err := url.Parse(stored)
	if err != nil {
		return "", nil, fmt.Errorf("the changefeed's stored source URI: %v", redact.ParseError(err))
	}
	to, err := url.Parse(given)
	if err != nil {
		return "", nil, fmt.Errorf("--source: %v; check its syntax (a password with special characters must be percent-encoded)", redact.ParseError(err))
	}
	if family(to.Scheme) != family(was.Scheme) {
		return "", nil, fmt.Errorf("--source: the changefeed's source is %s://, not %s://: its connection can change, not its database", was.Scheme, to.Scheme)
	}
	if to.Host == "" || to.Opaque != "" {
		return "", nil, fmt.Errorf("--source %s: name the server, as for create (%s://user@host:port/%s)", redact.URI(given), was.Scheme, strings.Trim(was.Path, "/"))
	}
	if db := strings.Trim(to.Path, "/"); db != "" && db != strings.Trim(was.Path, "/") {
		return "", nil, fmt.Errorf("--source: the changefeed replicates database %s, not %s: another database is another changefeed (cdcctl changefeed create)", strings.Trim(was.Path, "/"), db)
	}
	wq, tq := was.Query(), to.Query()
	for k := range tq {
		switch {
		case !own(k):
		case k == "tables" || k == "filter":
			return "", nil, fmt.Errorf("--source: leave %s= out: the tables change with --tables, --add-table or --remove-table", k)
		case tq.Get(k) != wq.Get(k):
			return "", nil, fmt.Errorf("--source: %s=%s: the changefeed's %s is fixed when it is created (%s); leave it out of --source", k, tq.Get(k), k, shown(wq.Get(k)))
		}
	}
	next := *was
	next.Host = to.Host
	next.User = userOf(was.User, to.User)
	q := url.Values{}
	for k, vs := range wq {
		if own(k) {
			q[k] = vs
		}
	}
	for k, vs := range tq {
		if !own(k) {
			q[k] = vs
		}
	}
	next.RawQuery = q.Encode()
	return next.String(), connectionChanges(was, &next, own), nil
}

// family is a scheme's source: postgresql:// is postgres://, mariadb://
// is mysql://.
func family(scheme string) string {
	switch scheme {
	case "postgresql":
		return "postgres"
	case "mariadb":
		return "mysql"
	}
	return scheme
}

// userOf is the user info of a new connection: given's, with its
// password masked (redact.Mask) the stored one's when the user is the
// same.
func userOf(was, given *url.Userinfo) *url.Userinfo {
	if given == nil {
		return nil
	}
	p, has := given.Password()
	if has && p == redact.Mask {
		if old, ok := was.Password(); ok && was.Username() == given.Username() {
			return url.UserPassword(given.Username(), old)
		}
		return url.User(given.Username())
	}
	return given
}

// connectionChanges says what differs between two URIs' connections.
func connectionChanges(was, next *url.URL, own func(string) bool) []string {
	var out []string
	if a, b := was.User.Username(), next.User.Username(); a != b {
		out = append(out, fmt.Sprintf("user: %s → %s", shown(a), shown(b)))
	}
	pa, hasA := was.User.Password()
	pb, hasB := next.User.Password()
	switch {
	case hasA == hasB && pa == pb:
	case !hasB:
		out = append(out, "password: from the agents' environment (none in the URI)")
	default:
		out = append(out, "password: changed")
	}
	if was.Host != next.Host {
		out = append(out, fmt.Sprintf("address: %s → %s", was.Host, next.Host))
	}
	wq, nq := was.Query(), next.Query()
	var keys []string
	for k := range wq {
		keys = append(keys, k)
	}
	for k := range nq {
		if !wq.Has(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		a, b := wq.Get(k), nq.Get(k)
		if own(k) || a == b {
			continue
		}
		if redact.Secret(k) {
			out = append(out, k+": changed")
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", k, shown(a), shown(b)))
	}
	return out
}

// shown is a value in a message, "(none)" when empty.
func shown(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}
