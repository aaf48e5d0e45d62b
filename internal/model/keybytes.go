package model

import (
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// BytesKeyType is the key type of a column that holds bytes, not text
// (MySQL's BINARY, VARBINARY, BLOB and BIT). Its values are encoded one
// character a byte, ISO-8859-1 read into UTF-8: a byte below 0x80 as
// itself, any other as the two bytes of U+0080..U+00FF. So every encoded
// key is valid UTF-8 and survives where keys are JSON strings (a
// partition's bounds and copy progress in etcd, plans, the API), where
// encoding/json writes U+FFFD for bytes that are not UTF-8; and encoded
// keys still compare as the bytes do, since each byte's code is
// self-delimiting and ordered as the byte. A key of such a column is
// shown, and typed, in hex: 0x8F3A.
const BytesKeyType = "bytes"

// Latin1 is s's bytes, each as the character of that number (ISO-8859-1
// read into UTF-8): valid UTF-8 whatever s holds, in the order of s's
// bytes; ASCII stays as it is. Keys of bytes are encoded so, and
// canal-json writes a binary column so, as Canal does.
func Latin1(s string) string {
	if isASCII(s) {
		return s
	}
	return string(appendLatin1(make([]byte, 0, 2*len(s)), s))
}

// appendLatin1 appends v's bytes, each as the character of that number.
func appendLatin1(dst []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < utf8.RuneSelf {
			dst = append(dst, c)
		} else {
			dst = append(dst, 0xc0|c>>6, 0x80|c&0x3f)
		}
	}
	return dst
}

// FromLatin1 is Latin1's inverse; false if enc holds a character above
// U+00FF or is not UTF-8.
func FromLatin1(enc string) (string, bool) {
	if isASCII(enc) {
		return enc, true
	}
	b := make([]byte, 0, len(enc))
	for _, r := range enc {
		if r > 0xff { // utf8.RuneError included
			return "", false
		}
		b = append(b, byte(r))
	}
	return string(b), true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// showBytes is a bytes column's encoded value as an operator reads and
// types it: 0x and its bytes in hex.
func showBytes(enc string) string {
	raw, ok := FromLatin1(enc)
	if !ok {
		return enc
	}
	return "0x" + strings.ToUpper(hex.EncodeToString([]byte(raw)))
}

// parseBytes reads a bytes column's value an operator typed: 0x and hex.
func parseBytes(text string) (string, error) {
	h, ok := strings.CutPrefix(text, "0x")
	if !ok {
		h, ok = strings.CutPrefix(text, "0X")
	}
	if !ok {
		return "", fmt.Errorf("%q is not hex: give a binary column's value as 0x and its bytes in hex (0x%X)", text, text)
	}
	raw, err := hex.DecodeString(h)
	if err != nil {
		return "", fmt.Errorf("%q is not hex: give a binary column's value as 0x and an even number of hex digits", text)
	}
	return string(raw), nil
}
