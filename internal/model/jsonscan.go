package model

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// jsonScan reads JSON in the exact form json.Marshal writes a known
// struct (progressjson.go, routejson.go): fields in declaration order,
// no spaces. ok goes false at the first byte it does not expect, and the
// caller then leaves the whole value to encoding/json.
type jsonScan struct {
	b  []byte
	i  int
	ok bool
}

func (s *jsonScan) peek(c byte) bool {
	return s.ok && s.i < len(s.b) && s.b[s.i] == c
}

// field consumes lit if it comes next.
func (s *jsonScan) field(lit string) bool {
	if !s.ok || len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// lit consumes lit, which must come next.
func (s *jsonScan) lit(lit string) {
	if !s.field(lit) {
		s.ok = false
	}
}

// uint reads an unsigned integer as json.Marshal writes one: no sign,
// no leading zero, no fraction or exponent.
func (s *jsonScan) uint() uint64 {
	if !s.ok {
		return 0
	}
	j := s.i
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == s.i || s.b[s.i] == '0' && j-s.i > 1 {
		s.ok = false
		return 0
	}
	var n uint64
	for _, c := range s.b[s.i:j] {
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			s.ok = false // past uint64: encoding/json says so
			return 0
		}
		n = n*10 + d
	}
	s.i = j
	return n
}

// int reads a signed integer as json.Marshal writes one.
func (s *jsonScan) int() int64 {
	neg := s.field("-")
	n := s.uint()
	switch {
	case neg && n <= 1<<63:
		return -int64(n)
	case !neg && n <= 1<<63-1:
		return int64(n)
	}
	s.ok = false
	return 0
}

// time reads a time.Time as encoding/json does: its UnmarshalJSON on the
// quoted text.
func (s *jsonScan) time() time.Time {
	var t time.Time
	if !s.peek('"') {
		s.ok = false
		return t
	}
	end := s.i + 1
	for end < len(s.b) && s.b[end] != '"' && s.b[end] != '\\' {
		end++
	}
	if end >= len(s.b) || s.b[end] != '"' || t.UnmarshalJSON(s.b[s.i:end+1]) != nil {
		s.ok = false
		return t
	}
	s.i = end + 1
	return t
}

// str reads a string. Escapes other than \u of a character outside the
// surrogates, and text that is not UTF-8 (which encoding/json replaces),
// are left to encoding/json.
func (s *jsonScan) str() string {
	if !s.peek('"') {
		s.ok = false
		return ""
	}
	s.i++
	start, plain := s.i, true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if plain {
				return string(raw)
			}
			return s.unescape(raw)
		case c == '\\':
			plain = false
			s.i += 2
		case c < 0x20:
			s.ok = false
			return ""
		case c >= utf8.RuneSelf:
			plain = false
			s.i++
		default:
			s.i++
		}
	}
	s.ok = false
	return ""
}

func (s *jsonScan) unescape(raw []byte) string {
	if !utf8.Valid(raw) {
		s.ok = false
		return ""
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i+1 >= len(raw) {
			s.ok = false
			return ""
		}
		i++
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+4 >= len(raw) {
				s.ok = false
				return ""
			}
			r, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 32)
			if err != nil || r >= 0xd800 && r < 0xe000 {
				s.ok = false
				return ""
			}
			out = utf8.AppendRune(out, rune(r))
			i += 4
		default:
			s.ok = false
			return ""
		}
	}
	return string(out)
}
