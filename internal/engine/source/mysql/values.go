package mysql

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// column is what decoding needs of a catalog column: its base type, and
// the values of an ENUM or SET (COLUMN_TYPE "enum('a','b')").
type column struct {
	base     string // "int", "bigint", "decimal", "enum", ...
	unsigned bool
	width    int      // BIT(n)'s bits, BINARY(n)'s bytes, TIME(n)'s, DATETIME(n)'s and TIMESTAMP(n)'s digits of fraction
	values   []string // ENUM's and SET's members, in order
	charset  string   // a character column's, when not UTF-8
	// zeroInt is a DECIMAL ZEROFILL's digits before the point (M-D): the
	// server pads them with zeros ("0001.50" in a DECIMAL(6,2)).
	zeroInt int
	// scaled: a FLOAT(M,D), whose text is not FLOAT's six digits.
	scaled bool
	// precision and scale: a DECIMAL's M and D (10 and 0 unless given).
	precision, scale int
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
		// The members as written, not lowered with the rest: the server
		// shows 'Paid' as it was declared.
		orig := strings.TrimSpace(typ)
		c.values = parseMembers(orig[len(c.base)+1 : strings.LastIndexByte(orig, ')')])
	case "bit":
		c.width, _ = strconv.Atoi(args)
		if c.width == 0 {
			c.width = 1
		}
	case "binary":
		c.width, _ = strconv.Atoi(args)
		if c.width == 0 {
			c.width = 1
		}
	case "time", "datetime", "timestamp":
		c.width, _ = strconv.Atoi(args)
	case "float":
		c.scaled = strings.Contains(args, ",")
	case "decimal", "numeric":
		c.precision, c.scale = 10, 0
		if m, d, _ := strings.Cut(args, ","); strings.TrimSpace(m) != "" {
			c.precision, _ = strconv.Atoi(strings.TrimSpace(m))
			c.scale, _ = strconv.Atoi(strings.TrimSpace(d))
		}
		if strings.Contains(t, "zerofill") {
			c.zeroInt = c.precision - c.scale
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
		// The server shows a FLOAT in six significant digits (%g), not
		// in the shortest text that reads back the same: 1234567 is
		// "1.23457e+06" in a SELECT, and a FLOAT key's text must be the
		// snapshot's. A FLOAT(M,D) it shows as the shortest.
		if c.scaled {
			return source.Text(strconv.FormatFloat(float64(x), 'g', -1, 32)), nil
		}
		return source.Text(strconv.FormatFloat(float64(x), 'g', 6, 32)), nil
	case float64:
		return source.Text(strconv.FormatFloat(x, 'g', -1, 64)), nil
	case string:
		if c.zeroInt > 0 {
			return source.Text(c.zeroPadded(x)), nil // a DECIMAL's digits
		}
		return c.textOf(x)
	case []byte:
		return c.textOf(string(x))
	case time.Time:
		return source.Text(c.datetime(x)), nil
	case fmt.Stringer:
		return source.Text(c.zeroPadded(x.String())), nil
	}
	return source.Value{}, fmt.Errorf("a %s value of Go type %T is not decoded", c.base, v)
}

// zeroPadded is a DECIMAL ZEROFILL's text as the server shows it: its
// digits before the point padded with zeros to M-D.
func (c column) zeroPadded(s string) string {
	if c.zeroInt == 0 || strings.HasPrefix(s, "-") {
		return s
	}
	whole, _, _ := strings.Cut(s, ".")
	if n := c.zeroInt - len(whole); n > 0 {
		return strings.Repeat("0", n) + s
	}
	return s
}

// datetime writes a DATETIME or TIMESTAMP (in UTC, the session time
// zone the tests and verify read with) as the text protocol does:
// 2006-01-02 15:04:05, then a point and the column's digits of fraction
// if it has any, zeros too (the layout's fraction truncates, as the
// server's stored digits are already cut to the column's).
func (c column) datetime(t time.Time) string {
	// Digit by digit: time.AppendFormat's layout interpretation was most
	// of a DATETIME's decoding. The fraction is cut, as the layout
	// ".000000"[:1+width] cut it, not rounded.
	t = t.UTC()
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	var b [26]byte
	put := func(at, v, n int) {
		for i := at + n - 1; i >= at; i-- {
			b[i] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, y, 4)
	b[4] = '-'
	put(5, int(mo), 2)
	b[7] = '-'
	put(8, d, 2)
	b[10] = ' '
	put(11, h, 2)
	b[13] = ':'
	put(14, mi, 2)
	b[16] = ':'
	put(17, s, 2)
	n := 19
	if w := min(c.width, 6); w > 0 {
		b[19] = '.'
		put(20, t.Nanosecond()/1000, 6)
		n = 20 + w
	}
	return string(b[:n])
}

// textOf is a string column's value as the server sends it: decode's,
// or, in a character set other than latin1 and UTF-8, its bytes recoded
// (charsets.go).
func (c column) textOf(s string) (source.Value, error) {
	if c.charset == "latin1" || asUTF8(c.charset) || c.base == "binary" || fixedBinary(c.base) {
		return source.Text(c.decode(s)), nil
	}
	out, err := recode(c.charset, s)
	if err != nil {
		return source.Value{}, err
	}
	return source.Text(out), nil
}

// decode turns a string column's bytes into what the server sends for
// them: latin1 is MySQL's cp1252, recoded to UTF-8; a BINARY(n) is
// padded with zero bytes to n (the log leaves them off); a TIME(n) has
// its n digits of fraction also when they are zero (the log's text
// leaves them off); UTF-8 and other binary columns are as they are.
func (c column) decode(s string) string {
	switch {
	case fixedBinary(c.base):
		return fixedText(c.base, s)
	case c.base == "binary" && len(s) < c.width:
		return s + strings.Repeat("\x00", c.width-len(s))
	case c.base == "time" && c.width > 0 && !strings.Contains(s, "."):
		return s + "." + strings.Repeat("0", c.width)
	case c.charset != "latin1":
		return s
	}
	return recodeSingle(&cp1252, s)
}

// cp1252 maps MySQL's latin1 (Windows-1252, with its five undefined
// bytes kept as the C1 controls) to Unicode.
var cp1252 = func() [256]rune {
	var m [256]rune
	for i := range m {
		m[i] = rune(i)
	}
	for i, r := range []rune("€\u0081‚ƒ„…†‡ˆ‰Š‹Œ\u008dŽ\u008f\u0090‘’“”•–—˜™š›œ\u009džŸ") {
		m[0x80+i] = r
	}
	return m
}()
