package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// Keys of database tables are routed in their natural order through an
// order-preserving text encoding: a partition's Start and End, and an
// event's Key, are encoded keys, compared as strings.
//
//   - an integer column (int2, int4, int8 and their serial forms) is its
//     value with the sign bit flipped, as 16 hex digits: numeric order;
//   - a column of bytes (BytesKeyType) is its bytes, each as a character
//     (keybytes.go): valid UTF-8, ordered as the bytes;
//   - any other column is its text form, ordered by bytes;
//   - the columns of a composite key are joined by a NUL byte, which no
//     PostgreSQL text holds and which sorts before every other byte, so
//     keys compare column by column; a key of one column may hold NULs
//     (a MySQL BINARY(16) uuid).
//
// A span's Key names the key's column types ("int8", "text,int4"); empty
// means the keys are plain text (the gen source) and are not encoded.

// NoKey is the key types of a table without a primary key: its rows have
// no key to route by (every row's key is ""), so it is one partition that
// cannot be split.
const NoKey = "-"

// ErrNoKey refuses a key for a table without a primary key.
var ErrNoKey = errors.New("the table has no primary key, so it is one partition that cannot be split")

// keySep joins the columns of a composite key.
const keySep = "\x00"

func isIntType(t string) bool {
	switch t {
	case "int2", "int4", "int8", "smallint", "integer", "int", "bigint", "serial", "bigserial", "smallserial":
		return true
	}
	return false
}

// SameKeyEncoding says keys of types a and b ("int4", "text,int8")
// encode alike: as many columns, each encoded the same way (integers of
// any width as integers, bytes as bytes, any other type as its text: an
// int4 key widened to int8, a varchar key made text, keep their keys).
func SameKeyEncoding(a, b string) bool {
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		if keyEncoding(as[i]) != keyEncoding(bs[i]) {
			return false
		}
	}
	return true
}

// keyEncoding names how AppendKeyValues encodes a key column of type t.
func keyEncoding(t string) string {
	switch {
	case t == NoKey:
		return NoKey
	case isIntType(t):
		return "int"
	case t == BytesKeyType:
		return "bytes"
	}
	return "text"
}

// EncodeKeyValues encodes a key's column values (their text form) for
// routing.
func EncodeKeyValues(keyTypes string, values []string) (string, error) {
	if keyTypes == "" {
		return strings.Join(values, ","), nil
	}
	// Every row is routed through here: one allocation, no formatting.
	size := len(values) - 1
	for _, v := range values {
		size += max(len(v), 16)
	}
	b, err := AppendKeyValues(make([]byte, 0, max(size, 0)), keyTypes, values)
	if err != nil || len(b) == 0 {
		return "", err
	}
	// b is not written again: the key is its bytes, not a copy (a second
	// allocation per row).
	return unsafe.String(unsafe.SliceData(b), len(b)), nil
}

// AppendKeyValues appends to dst what EncodeKeyValues returns, for a
// caller that keeps many keys in memory of its own (a snapshot chunk's
// rows: no allocation per row).
func AppendKeyValues(dst []byte, keyTypes string, values []string) ([]byte, error) {
	if keyTypes == "" {
		for i, v := range values {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, v...)
		}
		return dst, nil
	}
	if keyTypes == NoKey {
		if len(values) > 0 {
			return dst, ErrNoKey
		}
		return dst, nil
	}
	if n := strings.Count(keyTypes, ",") + 1; len(values) != n {
		return dst, fmt.Errorf("the key has %d columns (%s), got %d values", n, keyTypes, len(values))
	}
	rest := keyTypes
	for i, v := range values {
		var typ string
		typ, rest, _ = strings.Cut(rest, ",")
		if i > 0 {
			dst = append(dst, keySep...)
		}
		if isIntType(typ) {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return dst, fmt.Errorf("%q is not an integer (a 64-bit one)", v)
			}
			dst = appendHex16(dst, uint64(n)^(1<<63))
			continue
		}
		// A NUL would be read as the next column's start. A key of one
		// column has none: its bytes may hold NULs (a MySQL BINARY(16)
		// uuid has one in about one row of sixteen), in their order.
		if i > 0 || rest != "" {
			if strings.Contains(v, keySep) {
				return dst, fmt.Errorf("%q holds a NUL byte, which a key of several columns cannot (it joins them)", v)
			}
		}
		if typ == BytesKeyType {
			dst = appendLatin1(dst, v)
			continue
		}
		dst = append(dst, v...)
	}
	return dst, nil
}

// appendHex16 appends u as 16 lower-case hex digits.
func appendHex16(b []byte, u uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[(u>>uint(shift))&0xf])
	}
	return b
}

// EncodeKey encodes a key an operator typed: its columns' values separated
// by commas ("1500", "eu,42"); a value holding a comma or a double quote
// is quoted as in CSV (`"a,b",42`), as DecodeKey writes it.
func EncodeKey(keyTypes, text string) (string, error) {
	if keyTypes == "" {
		return text, nil
	}
	if keyTypes == NoKey {
		return "", ErrNoKey
	}
	values := []string{text}
	if n := strings.Count(keyTypes, ",") + 1; n > 1 {
		values = strings.SplitN(text, ",", n)
		if strings.Contains(text, `"`) {
			if quoted, ok := splitQuoted(text); ok && len(quoted) == n {
				values = quoted
			}
		}
	}
	types := strings.Split(keyTypes, ",")
	for i := range values {
		if i < len(types) && types[i] == BytesKeyType {
			raw, err := parseBytes(values[i])
			if err != nil {
				return "", fmt.Errorf("key %q does not parse for the key columns (%s): %v", text, keyTypes, err)
			}
			values[i] = raw
		}
	}
	enc, err := EncodeKeyValues(keyTypes, values)
	if err != nil {
		return "", fmt.Errorf("key %q does not parse for the key columns (%s): %v; give one value per key column, separated by commas (quote a value that holds a comma: \"a,b\",42)", text, keyTypes, err)
	}
	return enc, nil
}

// splitQuoted splits comma-separated values where a value may be quoted
// with double quotes ("" inside for one quote), exactly: unlike
// encoding/csv it keeps every byte, carriage returns included.
func splitQuoted(text string) ([]string, bool) {
	var out []string
	for {
		if !strings.HasPrefix(text, `"`) {
			v, rest, more := strings.Cut(text, ",")
			out = append(out, v)
			if !more {
				return out, true
			}
			text = rest
			continue
		}
		var b strings.Builder
		i := 1
		for {
			j := strings.IndexByte(text[i:], '"')
			if j < 0 {
				return nil, false // no closing quote
			}
			b.WriteString(text[i : i+j])
			i += j + 1
			if strings.HasPrefix(text[i:], `"`) {
				b.WriteByte('"')
				i++
				continue
			}
			break
		}
		out = append(out, b.String())
		switch {
		case i == len(text):
			return out, true
		case text[i] == ',':
			text = text[i+1:]
		default:
			return nil, false // text after a closing quote
		}
	}
}

// splitKey cuts an encoded key of n columns into its columns' parts: a
// key of one column is whole, NULs and all.
func splitKey(enc string, n int) []string {
	if n == 1 {
		return []string{enc}
	}
	return strings.Split(enc, keySep)
}

// DecodeKey turns an encoded key back into its text form ("1500",
// "eu,42"); "" stays "" (an open bound).
func DecodeKey(keyTypes, enc string) string {
	if keyTypes == "" || keyTypes == NoKey || enc == "" {
		return enc
	}
	types := strings.Split(keyTypes, ",")
	parts := splitKey(enc, len(types))
	for i, p := range parts {
		if i < len(types) && isIntType(types[i]) {
			if u, err := strconv.ParseUint(p, 16, 64); err == nil && len(p) == 16 {
				parts[i] = strconv.FormatInt(int64(u^(1<<63)), 10)
			}
			continue
		}
		if i < len(types) && types[i] == BytesKeyType {
			parts[i] = showBytes(p)
			continue
		}
		if len(types) > 1 && strings.ContainsAny(p, `,"`) {
			// Quoted as in CSV, so that the text typed back is this key.
			parts[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
		}
	}
	return strings.Join(parts, ",")
}

// ImageKey names one row of a table without a primary key, where only the
// whole row tells rows apart: its image (column to text, nil for NULL) as
// JSON with the columns in name order, then '#' and which copy of that
// image it is (1, 2, ...), since such a table may hold equal rows.
func ImageKey(row map[string]*string, copyNo int) string {
	b, _ := json.Marshal(row) // maps marshal in key order
	return string(b) + "#" + strconv.Itoa(copyNo)
}

// DecodeKeyValues turns an encoded key back into its columns' values
// (their text form), the inverse of EncodeKeyValues.
func DecodeKeyValues(keyTypes, enc string) ([]string, error) {
	if keyTypes == "" || keyTypes == NoKey {
		return nil, fmt.Errorf("keys of types %q are not encoded", keyTypes)
	}
	types := strings.Split(keyTypes, ",")
	parts := splitKey(enc, len(types))
	if len(parts) != len(types) {
		return nil, fmt.Errorf("encoded key %q has %d columns, the key %d (%s)", enc, len(parts), len(types), keyTypes)
	}
	for i, p := range parts {
		if types[i] == BytesKeyType {
			raw, ok := FromLatin1(p)
			if !ok {
				return nil, fmt.Errorf("encoded key %q: column %d is not an encoded %s", enc, i+1, types[i])
			}
			parts[i] = raw
			continue
		}
		if !isIntType(types[i]) {
			continue
		}
		u, err := strconv.ParseUint(p, 16, 64)
		if err != nil || len(p) != 16 {
			return nil, fmt.Errorf("encoded key %q: column %d is not an encoded %s", enc, i+1, types[i])
		}
		parts[i] = strconv.FormatInt(int64(u^(1<<63)), 10)
	}
	return parts, nil
}

// IsIntKeyType says a key column of this type is encoded as an integer
// (numeric order); any other is ordered by the bytes of its text.
func IsIntKeyType(t string) bool { return isIntType(t) }

// JoinKeyTexts names a row by its key columns' texts, in key order: joined
// by commas, a text holding a comma or a quote quoted as in CSV, so that
// two keys never read the same (('x,y','z') and ('x','y,z') were both
// "x,y,z", and verify took one row for the other). One column's text is
// itself.
func JoinKeyTexts(parts []string) string {
	if len(parts) == 1 {
		return parts[0]
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = p
		if strings.ContainsAny(p, `,"`) {
			quoted[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
		}
	}
	return strings.Join(quoted, ",")
}
