package mysql

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// column is what decoding needs of a catalog column: its base type, and
// the values of an ENUM or SET (COLUMN_TYPE "enum('a','b')").
type column struct {
	base     string // "int", "bigint", "decimal", "enum", ...
	unsigned bool
	width    int      // BIT(n)'s bits
	values   []string // ENUM's and SET's members, in order
}

// parseColumn reads a catalog COLUMN_TYPE.
func parseColumn(typ string) column {
	t := strings.ToLower(strings.TrimSpace(typ))
	c := column{unsigned: strings.Contains(t, " unsigned")}
	base, args, _ := strings.Cut(t, "(")
	c.base = strings.Fields(base + " ")[0]
	args, _, _ = strings.Cut(args, ")")
	switch c.base {
	case "enum", "set":
		c.values = parseMembers(t[len(c.base)+1 : strings.LastIndexByte(t, ')')])
	case "bit":
		c.width, _ = strconv.Atoi(args)
		if c.width == 0 {
			c.width = 1
		}
	}
	return c
}

// parseMembers reads 'a','b”c' (quotes doubled inside) into its members.
func parseMembers(s string) []string {
	var out []string
	for i := 0; i < len(s); i++ {
		if s[i] != '\'' {
			continue
		}
		var b strings.Builder
		for i++; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			b.WriteByte(s[i])
		}
		out = append(out, b.String())
	}
	return out
}

// text renders a value the binary log carried (as go-mysql decodes it)
// in the form the server's text protocol returns it for a SELECT, so
// that a sink's rows compare equal to the upstream's (verify).
func (c column) text(v any) (source.Value, error) {
	switch x := v.(type) {
	case nil:
		return source.Null, nil
	case int8:
		if c.unsigned {
			return source.Text(strconv.FormatUint(uint64(uint8(x)), 10)), nil
		}
		return source.Text(strconv.FormatInt(int64(x), 10)), nil
	case int16:
		if c.unsigned {
			return source.Text(strconv.FormatUint(uint64(uint16(x)), 10)), nil
		}
		return source.Text(strconv.FormatInt(int64(x), 10)), nil
	case int32:
		if c.unsigned {
			if c.base == "mediumint" {
				return source.Text(strconv.FormatUint(uint64(uint32(x)&0xffffff), 10)), nil
			}
			return source.Text(strconv.FormatUint(uint64(uint32(x)), 10)), nil
		}
		return source.Text(strconv.FormatInt(int64(x), 10)), nil
	case int64:
		switch c.base {
		case "enum":
			if x <= 0 || int(x) > len(c.values) {
				return source.Text(""), nil // the error value ''
			}
			return source.Text(c.values[x-1]), nil
		case "set":
			var members []string
			for i, m := range c.values {
				if x&(1<<uint(i)) != 0 {
					members = append(members, m)
				}
			}
			return source.Text(strings.Join(members, ",")), nil
		case "bit":
			// The text protocol sends a BIT's bytes, big-endian.
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(x))
			return source.Text(string(b[8-(c.width+7)/8:])), nil
		}
		if c.unsigned {
			return source.Text(strconv.FormatUint(uint64(x), 10)), nil
		}
		return source.Text(strconv.FormatInt(x, 10)), nil
	case int:
		return source.Text(strconv.Itoa(x)), nil
	case float32:
		return source.Text(strconv.FormatFloat(float64(x), 'g', -1, 32)), nil
	case float64:
		return source.Text(strconv.FormatFloat(x, 'g', -1, 64)), nil
	case string:
		return source.Text(x), nil
	case []byte:
		return source.Text(string(x)), nil
	case fmt.Stringer:
		return source.Text(x.String()), nil
	}
	return source.Value{}, fmt.Errorf("a %s value of Go type %T is not decoded", c.base, v)
}
