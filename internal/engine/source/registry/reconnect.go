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
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/redact"
)

// reconnect is a changefeed's stored source URI with the connection of
// given, a URI as an operator types it for create: its user, password,
// host and port, and its query parameters that are not the source's own
// (own says which are: the rest are the driver's). A password given as
// redact.Mask (what 'changefeed get' shows) keeps the stored one; none
// leaves it to the agents' environment. The database, and every
// parameter of the source's own but the tunable ones (snapshot-rate=),
// stay the stored URI's: given may leave them out, or repeat them
// unchanged; tables change with an update of the tables. Changes are one line each, no secret in them; none when
// given changes nothing. canonical renders a URI as the source stores
// it (nil: as written): a parameter of the source's own repeated in
// another form of the same meaning (catalog-interval=1m for the stored
// 1m0s, auto-remedy=true for the default the stored URI leaves out) is
// unchanged.
func reconnect(stored, given string, own func(param string) bool, canonical func(uri string) (string, error)) (uri string, changes []string, err error) {
	was, err := url.Parse(stored)
	if err != nil {
		return "", nil, fmt.Errorf("the changefeed's stored source URI: %v", redact.ParseError(err))
	}
	to, err := url.Parse(given)
	if err != nil || to.User == nil && strings.Contains(given, "@") {
		// Read otherwise than typed (a password holding / # ? or @ cuts
		// the URI there): nothing of it is shown, it may be the password.
		return "", nil, errUnreadable
	}
	if family(to.Scheme) != family(was.Scheme) {
		return "", nil, fmt.Errorf("--source: the changefeed's source is %s://, not %s://: its connection can change, not its database", was.Scheme, to.Scheme)
	}
	if to.Host == "" || to.Opaque != "" {
		return "", nil, fmt.Errorf("--source: name the server, as for create (%s://user@host:port/%s)", was.Scheme, strings.Trim(was.Path, "/"))
	}
	if db := strings.Trim(to.Path, "/"); db != "" && db != strings.Trim(was.Path, "/") {
		return "", nil, fmt.Errorf("--source: the changefeed replicates database %s, not %s: another database is another changefeed (cdcctl changefeed create)", strings.Trim(was.Path, "/"), db)
	}
	wq, tq := was.Query(), to.Query()
	for k := range tq {
		switch {
		case tunable[k] != nil:
			// Read below.
		case !own(k):
		case k == "tables" || k == "filter":
			return "", nil, fmt.Errorf("--source: leave %s= out: the tables change with --tables, --add-table or --remove-table", k)
		case tq.Get(k) != wq.Get(k) && !sameMeaning(was, k, tq.Get(k), canonical):
			return "", nil, fmt.Errorf("--source: %s=%s: the changefeed's %s is fixed when it is created (%s); leave it out of --source", k, tq.Get(k), k, shown(wq.Get(k)))
		}
	}
	next := *was
	next.Host = to.Host
	if next.User, err = userOf(was.User, to.User); err != nil {
		return "", nil, err
	}
	q := url.Values{}
	for k, vs := range wq {
		if own(k) {
			q[k] = vs
		}
	}
	for k, vs := range tq {
		if tune := tunable[k]; tune != nil {
			if len(vs) != 1 {
				return "", nil, fmt.Errorf("--source: give %s= once", k)
			}
			v, err := tune(vs[0])
			if err != nil {
				return "", nil, fmt.Errorf("--source: %w", err)
			}
			if v == "" {
				delete(q, k) // the default, as the source stores it
			} else {
				q[k] = []string{v}
			}
			continue
		}
		if own(k) {
			continue
		}
		if redact.Secret(k) && len(vs) == 1 && vs[0] == redact.Mask {
			// A secret parameter as 'changefeed get' shows it: the
			// changefeed's own.
			if !wq.Has(k) {
				return "", nil, fmt.Errorf("--source: %s=%s keeps the changefeed's %s, and it has none: give it", k, redact.Mask, k)
			}
			vs = wq[k]
		}
		q[k] = vs
	}
	next.RawQuery = q.Encode()
	changes = connectionChanges(was, &next, own)
	if len(changes) == 0 {
		return stored, nil, nil // the same connection, however written
	}
	return next.String(), changes, nil
}

// tunable are the parameters of a source's own that an update of the
// connection may change: how hard the changefeed may work the upstream,
// not what it replicates. Left out of --source, they keep their value.
// Each reads a given value as the source stores it ("": the default,
// left out of the URI).
var tunable = map[string]func(string) (string, error){
	"snapshot-rate": func(v string) (string, error) {
		n, err := source.ParseSnapshotRate(v)
		if err != nil || n == 0 {
			return "", err
		}
		return strconv.Itoa(n), nil
	},
}

// sameMeaning says whether the stored URI with its parameter k set to
// v is the stored URI as the source reads it.
func sameMeaning(was *url.URL, k, v string, canonical func(string) (string, error)) bool {
	if canonical == nil {
		return false
	}
	stored, err := canonical(was.String())
	if err != nil {
		return false
	}
	next := *was
	q := was.Query()
	q.Set(k, v)
	next.RawQuery = q.Encode()
	given, err := canonical(next.String())
	return err == nil && given == stored
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

// errUnreadable refuses a URI that does not read as typed, showing
// none of it.
var errUnreadable = fmt.Errorf("--source: the URI does not read as scheme://user:password@host:port/database?parameters; percent-encode a password's special characters (/ as %%2F, # as %%23, ? as %%3F, @ as %%40, %% as %%25)")

// userOf is the user info of a new connection: given's, its password
// masked (redact.Mask) being the stored one's, which is the same user's.
func userOf(was, given *url.Userinfo) (*url.Userinfo, error) {
	if given == nil {
		return nil, nil
	}
	p, has := given.Password()
	if !has || p != redact.Mask {
		return given, nil
	}
	if was.Username() != given.Username() {
		return nil, fmt.Errorf("--source: the password %s keeps the changefeed's, which is user %s's: give user %s's password", redact.Mask, shown(was.Username()), given.Username())
	}
	if old, ok := was.Password(); ok {
		return url.UserPassword(given.Username(), old), nil
	}
	return url.User(given.Username()), nil // it has none: the environment's
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
	if hostPort(was) != hostPort(next) {
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
		if own(k) && tunable[k] == nil || a == b {
			continue
		}
		if redact.Secret(k) {
			out = append(out, k+" (a parameter): "+map[bool]string{true: "changed", false: "removed"}[nq.Has(k)])
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", k, shown(a), shown(b)))
	}
	return out
}

// hostPort is a URI's address as compared: the host's case and the
// source's default port are no change.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"postgres": "5432", "mysql": "3306"}[family(u.Scheme)]
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}

// shown is a value in a message, "(none)" when empty.
func shown(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}
