package mysql

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/encoding/unicode/utf32"
)

// The binary log carries a character column's bytes in the column's own
// character set; a SELECT over the reader's utf8mb4 connection gets them
// converted by the server. A value is sent as the server shows it, so
// that a row's key routes as its snapshot copy's does and the sink
// compares equal to the table (verify): every set but UTF-8's is
// recoded here. latin1 has its own table (values.go: MySQL's latin1 is
// Windows-1252 with five C1 controls); the others go through
// golang.org/x/text's decoders, but for the characters MySQL maps
// otherwise (JIS X 0208's wave dash, the user-defined areas of cp932 and
// EUC-JP, MySQL's own Big5): those come from setFixes
// (charsets_fixes.go), which TestCharacterSetsDecodeAsTheServerConverts
// compares with MariaDB's conversion of every byte, and every two-byte
// sequence of the multi-byte sets, and writes again with -update-charsets.
// A set not here (swe7, dec8, hp8, armscii8, geostd8, keybcs2, macce)
// holds its table: "a row does not decode", naming the set and the fix.
var decoders = map[string]encoding.Encoding{
	"latin2": charmap.ISO8859_2, "latin5": charmap.ISO8859_9, "latin7": charmap.ISO8859_13,
	"greek": charmap.ISO8859_7, "hebrew": charmap.ISO8859_8,
	"cp1250": charmap.Windows1250, "cp1251": charmap.Windows1251, "cp1256": charmap.Windows1256, "cp1257": charmap.Windows1257,
	"cp850": charmap.CodePage850, "cp852": charmap.CodePage852, "cp866": charmap.CodePage866,
	"koi8r": charmap.KOI8R, "koi8u": charmap.KOI8U, "macroman": charmap.Macintosh, "tis620": charmap.Windows874,
	"gbk": simplifiedchinese.GBK, "gb2312": simplifiedchinese.GBK, "gb18030": simplifiedchinese.GB18030,
	"big5": traditionalchinese.Big5,
	"sjis": japanese.ShiftJIS, "cp932": japanese.ShiftJIS, "ujis": japanese.EUCJP, "eucjpms": japanese.EUCJP,
	"euckr": korean.EUCKR,
	"ucs2":  unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM), "utf16": unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM),
	"utf16le": unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM), "utf32": utf32.UTF32(utf32.BigEndian, utf32.IgnoreBOM),
}

// charFix is a run of a set's byte sequences (big-endian, as a number)
// the server maps otherwise than x/text: from..to map to r, r+1, ….
type charFix struct {
	from, to uint32
	r        rune
}

// singleByte are the single-byte sets' tables: x/text's, with the fixes.
var singleByte = func() map[string]*[256]rune {
	out := map[string]*[256]rune{}
	for set, enc := range decoders {
		cm, ok := enc.(*charmap.Charmap)
		if !ok {
			continue
		}
		var t [256]rune
		for b := range t {
			t[b] = cm.DecodeByte(byte(b))
		}
		for _, f := range setFixes[set] {
			for seq := f.from; seq <= f.to && seq < 256; seq++ {
				t[seq] = f.r + rune(seq-f.from)
			}
		}
		out[set] = &t
	}
	return out
}()

// asUTF8 says the set's bytes are UTF-8 already (or a column of bytes).
func asUTF8(charset string) bool {
	switch charset {
	case "", "utf8mb4", "utf8mb3", "utf8", "ascii", "binary":
		return true
	}
	return false
}

// recode is s, a value's bytes in charset, as the server shows it in
// UTF-8.
func recode(charset, s string) (string, error) {
	if t := singleByte[charset]; t != nil {
		return recodeSingle(t, s), nil
	}
	d, ok := decoders[charset]
	if !ok {
		return "", fmt.Errorf("its column's character set %s is not one the reader decodes (convert the column: ALTER TABLE … CONVERT TO CHARACTER SET utf8mb4, or leave the table out)", charset)
	}
	fixes := setFixes[charset]
	if len(fixes) == 0 {
		return d.NewDecoder().String(s)
	}
	// Character by character where a fix may apply; the runs between
	// go through x/text whole.
	var b strings.Builder
	b.Grow(len(s) * 3 / 2)
	run := 0
	flush := func(end int) error {
		if run < end {
			out, err := d.NewDecoder().String(s[run:end])
			if err != nil {
				return err
			}
			b.WriteString(out)
		}
		return nil
	}
	for i := 0; i < len(s); {
		n := charLen(charset, s[i:])
		if r, ok := fixed(fixes, s[i:i+n]); ok {
			if err := flush(i); err != nil {
				return "", err
			}
			b.WriteRune(r)
			run = i + n
		}
		i += n
	}
	if err := flush(len(s)); err != nil {
		return "", err
	}
	return b.String(), nil
}

func recodeSingle(t *[256]rune, s string) string {
	ascii := 0
	for ascii < len(s) && s[ascii] < 0x80 && t[s[ascii]] == rune(s[ascii]) {
		ascii++
	}
	if ascii == len(s) {
		return s // ASCII reads the same: no copy
	}
	var b strings.Builder
	b.Grow(len(s) + 2*(len(s)-ascii))
	b.WriteString(s[:ascii])
	for i := ascii; i < len(s); i++ {
		b.WriteRune(t[s[i]])
	}
	return b.String()
}

// fixed is the fix for one character's bytes, if any.
func fixed(fixes []charFix, c string) (rune, bool) {
	if len(c) > 4 {
		return 0, false
	}
	var seq uint32
	for i := 0; i < len(c); i++ {
		seq = seq<<8 | uint32(c[i])
	}
	i := sort.Search(len(fixes), func(i int) bool { return fixes[i].to >= seq })
	if i < len(fixes) && fixes[i].from <= seq && seq <= fixes[i].to {
		return fixes[i].r + rune(seq-fixes[i].from), true
	}
	return 0, false
}

// charLen is how many bytes of s its first character takes in a
// multi-byte set (a byte that cannot begin one: 1).
func charLen(charset string, s string) int {
	b := s[0]
	if b < 0x80 {
		return 1
	}
	switch charset {
	case "sjis", "cp932":
		if b >= 0xa1 && b <= 0xdf {
			return 1 // half-width katakana
		}
	case "ujis", "eucjpms":
		if b == 0x8f {
			return min(3, len(s))
		}
	case "gb18030":
		if len(s) >= 4 && s[1] >= 0x30 && s[1] <= 0x39 {
			return 4
		}
	}
	return min(2, len(s))
}
