package model

import (
	"fmt"
	"strings"
)

// A database table's name, as partitions, events, etcd and the API carry
// it, is one string: schema.table. A part that is not a plain lowercase
// identifier is quoted as PostgreSQL quotes it ("Orders", "a""b", "my
// table"), so the string splits back into exactly the upstream's names
// and reads as SQL would. Plain names (public.orders) are unchanged, so
// names written before quoting existed mean what they meant.

// TableName joins a schema and a table into one name, quoting a part
// that is not plain; without a schema it is the table alone.
func TableName(schema, table string) string {
	if schema == "" {
		return quotePart(table)
	}
	return quotePart(schema) + "." + quotePart(table)
}

// SplitTableName splits a name TableName made into the upstream's schema
// and table ("" schema when it has none). It never fails: a malformed
// quote is taken as it is, split at its first dot.
func SplitTableName(name string) (schema, table string) {
	first, rest, ok := cutPart(name)
	if !ok {
		if i := strings.IndexByte(name, '.'); i >= 0 {
			return name[:i], name[i+1:]
		}
		return "", name
	}
	if rest == "" {
		return "", first
	}
	if second, tail, ok := cutPart(rest[1:]); ok && tail == "" {
		return first, second
	}
	return first, rest[1:]
}

// ParseTableName reads a table name as an operator writes it: schema.table
// or table, each part a plain lowercase identifier or a double-quoted one
// ("Orders"). An unquoted part with capitals is refused rather than
// folded: PostgreSQL would fold it to lowercase, which is rarely what
// was meant. It returns the parts as the upstream names them.
func ParseTableName(s string) (schema, table string, err error) {
	bad := fmt.Errorf("table %q: write schema.table or table, each a lowercase name or a double-quoted one (public.orders, public.\"Orders\")", s)
	var names, raws []string
	for rest := s; ; {
		name, tail, ok := cutPart(rest)
		if !ok || name == "" || len(names) == 2 {
			return "", "", bad
		}
		names, raws = append(names, name), append(raws, rest[:len(rest)-len(tail)])
		if tail == "" {
			break
		}
		rest = tail[1:]
	}
	for i, raw := range raws {
		if !strings.HasPrefix(raw, `"`) && !plainName(names[i]) {
			return "", "", fmt.Errorf("table %q: %s is not a lowercase name, and PostgreSQL folds unquoted names to lowercase: write %s for the name as it is, or %s", s, raw, quote(names[i]), strings.ToLower(raw))
		}
	}
	if len(names) == 1 {
		return "", names[0], nil
	}
	return names[0], names[1], nil
}

// SplitTableList splits a comma-separated list of names or rules at the
// commas outside double quotes; items are trimmed and empty ones left
// out.
func SplitTableList(s string) []string {
	var out []string
	for _, item := range SplitOutsideQuotes(s, ',') {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// SplitOutsideQuotes splits s at each sep outside double quotes, keeping
// every piece as it is (empty ones too).
func SplitOutsideQuotes(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] == '"' {
			quoted = !quoted
		}
		if i == len(s) || s[i] == sep && !quoted {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// cutPart reads one part of a name: a quoted identifier (its quotes
// undone) or the text up to the next dot; rest begins at that dot ("" at
// the end). ok is false for an unterminated quote or text after a
// closing quote that is not a dot.
func cutPart(s string) (part, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		if i := strings.IndexByte(s, '.'); i >= 0 {
			return s[:i], s[i:], true
		}
		return s, "", true
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '"' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '"' {
			b.WriteByte('"')
			i++
			continue
		}
		rest = s[i+1:]
		if rest != "" && rest[0] != '.' {
			return "", "", false
		}
		return b.String(), rest, true
	}
	return "", "", false
}

// quotePart quotes a name unless it is plain.
func quotePart(s string) string {
	if plainName(s) {
		return s
	}
	return quote(s)
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// plainName says whether a name needs no quotes: a lowercase letter or
// underscore, then lowercase letters, digits, underscores and dollars.
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '$'):
		default:
			return false
		}
	}
	return true
}
