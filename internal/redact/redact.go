// Package redact makes URIs fit for API responses, error messages, plan
// records and logs: a password in the user info and the values of query
// parameters that name a secret are masked. The stored URI keeps them;
// only what is shown is redacted.
package redact

import (
	"errors"
	"net/url"
	"strings"
)

// Mask replaces a secret.
const Mask = "xxxxx"

// URI is raw with its secrets masked. A URI that does not parse is not
// shown at all: whatever it holds may be a secret.
func URI(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		scheme, _, _ := strings.Cut(raw, ":")
		if len(scheme) > 16 || strings.ContainsAny(scheme, "/@?") {
			scheme = "uri"
		}
		return scheme + "://(unparsable URI, not shown)"
	}
	changed := false
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
			changed = true
		}
	} else if at := strings.LastIndex(u.Opaque, "@"); at >= 0 {
		// Not parsed as user info (no "//"): what stands before the @
		// may be a password.
		u.Opaque = Mask + u.Opaque[at:]
		changed = true
	}
	if u.RawQuery != "" {
		q := u.Query()
		masked := false
		for name, vs := range q {
			if Secret(name) {
				for i := range vs {
					vs[i] = Mask
				}
				masked = true
			}
		}
		if masked {
			u.RawQuery = q.Encode()
			changed = true
		}
	}
	if !changed {
		return raw // as given: url.String would change a URI with no host
	}
	return u.String()
}

// Secret reports whether a parameter's name says its value is a secret.
func Secret(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"password", "passwd", "secret", "token", "credential", "private"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	switch strings.NewReplacer("-", "", "_", "").Replace(n) {
	case "sig", "sas", "accesskey", "apikey", "accountkey", "pwd":
		return true
	}
	return false
}

// ParseError is a url.Parse error without the URL it quotes (which may
// hold a secret).
func ParseError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Value is a query parameter's value fit to show: masked if its name
// says it is a secret.
func Value(name, v string) string {
	if Secret(name) {
		return Mask
	}
	return v
}
