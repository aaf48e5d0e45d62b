// Package redact makes URIs fit for API responses, error messages, plan
// records and logs: a password in the user info and the values of query
// parameters that name a secret are masked. The stored URI keeps them;
// only what is shown is redacted.
package redact

import (
	"errors"
	"net/url"
	"regexp"
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
	if u.User == nil {
		// An @ the parser did not take for user info's end: what stands
		// before it, from the scheme's slashes on, may be a password,
		// mistyped ("mysql:u:pw@h", "mysql:/u:pw@h", "mysql:///u:pw@h"),
		// or one the parser took for a port, a path or a fragment
		// ("postgres://u:/pw@h", "…://u:12#34@h"). Masked whole, in the
		// text as typed, before anything of it is cut off.
		if at := strings.LastIndex(raw, "@"); at >= 0 {
			start := 0
			if u.Scheme != "" {
				start = len(u.Scheme) + 1
			}
			for start < at && raw[start] == '/' {
				start++
			}
			if start < at && raw[start:at] != Mask {
				return URI(raw[:start] + Mask + raw[at:])
			}
		}
	}
	changed := false
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
			changed = true
		}
	}
	if u.Fragment != "" || u.RawFragment != "" {
		// No part of a source or sink URI, and not shown: the pairs
		// masked below would take it for a secret's value's end.
		u.Fragment, u.RawFragment = "", ""
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
		// As given (url.String would change a URI with no host), but a
		// pair the query parser skipped (one with a ';') is masked too.
		return maskPairs(raw)
	}
	return maskPairs(u.String())
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

// uriInText finds the URIs in free text: a scheme, ":/" (or "://", or
// any slashes: a URI mistyped is quoted back as typed) and everything up
// to a space or a quote. What a message quotes of a URI (an opener's
// error quoting the URL it refused) is found by its shape, wherever it
// stands.
var uriInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.\\-]{0,15}:/+[^\\s\"'<>`]+")

// dsnInText finds a MySQL driver DSN's user:password@tcp(...) or
// @unix(...).
var dsnInText = regexp.MustCompile(`([^\s:/@"'(]+):([^\s@/"']+)@(tcp|unix)\(`)

// userInText finds user:password@ anywhere else: a URI without slashes
// ("mysql:root:pw@host", which is no URI to the finder above). A user
// name's characters only, and no brackets: a form shown in a message
// ("[user[:password]@]tcp(host)") is no secret.
var userInText = regexp.MustCompile(`([A-Za-z0-9_.%+\-]+):([^\s@/"'<>\[\]]+)@`)

// Text is a message (an error, a log line) with the secrets of every URI,
// DSN and name=value pair in it masked. Every error an API serves and
// every line an agent logs passes through it, so a secret an opener or a
// driver quotes back is not shown, whoever wrote the message.
func Text(s string) string {
	if !strings.Contains(s, "=") && !strings.Contains(s, "@") {
		return s // nothing that can hold a secret: the common case, cheap
	}
	s = uriInText.ReplaceAllStringFunc(s, func(u string) string {
		// Punctuation after a URI is the sentence's ("…?a=b: invalid").
		trimmed := strings.TrimRight(u, ".,:;)]}")
		return URI(trimmed) + u[len(trimmed):]
	})
	s = dsnInText.ReplaceAllString(s, "$1:"+Mask+"@$3(")
	s = userInText.ReplaceAllString(s, "$1:"+Mask+"@")
	return maskPairs(s)
}

// maskPairs masks the values of the name=value pairs whose name says
// they are secret. Every "=" is looked at, whatever pair or quoted value
// it stands in: a secret pair inside another's quoted value (a DSN
// quoted whole, a quote left open) was taken for that value and shown.
func maskPairs(s string) string {
	if !strings.Contains(s, "=") {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			continue
		}
		j := i
		for j > 0 && isNameByte(s[j-1]) {
			j--
		}
		if j == i || !Secret(s[j:i]) {
			continue
		}
		end := valueEnd(s, i+1)
		b.WriteString(s[last : i+1])
		b.WriteString(Mask)
		last, i = end, end-1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// valueEnd is where the value that starts at k ends: after its closing
// quote (or at the end, a quote left open), else at a separator; a
// sentence's punctuation after it is not its.
func valueEnd(s string, k int) int {
	if k < len(s) && (s[k] == '"' || s[k] == '\'') {
		if q := strings.IndexByte(s[k+1:], s[k]); q >= 0 {
			return k + 1 + q + 1
		}
		return len(s)
	}
	end := k
	for end < len(s) && !strings.ContainsRune(" \t\r\n&;,\"')?=", rune(s[end])) {
		end++
	}
	for end > k && strings.ContainsRune(".,:", rune(s[end-1])) {
		end--
	}
	return end
}
