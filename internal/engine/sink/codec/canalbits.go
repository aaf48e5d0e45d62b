package codec

import (
	"encoding/json"
	"strconv"
)

// A MySQL BIT(n) value is its bytes, big-endian (as a SELECT returns it,
// (n+7)/8 of them). canal-json writes it as Canal does, the unsigned
// number in decimal ("5" for b'101'): a JSON string holds only UTF-8,
// and its bytes as they were came back as U+FFFD. The decimal is read
// back into the value's bytes by the column's width, from its mysqlType.

// bitsText is a BIT value's canal-json text; false if it is longer than
// 64 bits (not a BIT value).
func bitsText(v string) (string, bool) {
	if len(v) > 8 {
		return "", false
	}
	var u uint64
	for i := 0; i < len(v); i++ {
		u = u<<8 | uint64(v[i])
	}
	return strconv.FormatUint(u, 10), true
}

// bitsValue is bitsText's inverse for a BIT(width) column; false if text
// is no such number.
func bitsValue(text string, width int) (string, bool) {
	u, err := strconv.ParseUint(text, 10, 64)
	if err != nil || width < 1 || width > 64 || (width < 64 && u >= 1<<uint(width)) {
		return "", false
	}
	b := make([]byte, (width+7)/8)
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(u)
		u >>= 8
	}
	return string(b), true
}

// bitColumns are the BIT columns of a message's mysqlType, by their
// width; nil when there are none.
type bitColumns map[string]int

func (b *bitColumns) UnmarshalJSON(data []byte) error {
	var types map[string]string
	if err := json.Unmarshal(data, &types); err != nil {
		return err
	}
	for name, t := range types {
		b.add(name, t)
	}
	return nil
}

// add keeps name if its type is a BIT.
func (b *bitColumns) add(name, mysqlType string) {
	w := bitWidth(mysqlType)
	keepColumn(b, name, w, w > 0)
}
