package codec

// fastReader is the JSON scanner fastCanalChange reads a line with
// (fastjson.go): white space, literals, strings without escapes, plain
// numbers, and values passed over. Each read reports false where the line
// holds anything else, and the line is left to encoding/json.

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

type fastReader struct {
	b []byte
	i int
}

func (r *fastReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// next reports the next byte after white space, 0 at the end.
func (r *fastReader) next() byte {
	r.ws()
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

func (r *fastReader) take(c byte) bool {
	if r.next() == c {
		r.i++
		return true
	}
	return false
}

// str reads a string without escapes, in valid UTF-8.
func (r *fastReader) str() ([]byte, bool) {
	if !r.take('"') {
		return nil, false
	}
	start := r.i
	for r.i < len(r.b) {
		switch c := r.b[r.i]; {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		r.i++
	}
	return nil, false
}

func (r *fastReader) lit(word string) bool {
	r.ws()
	if bytes.HasPrefix(r.b[r.i:], []byte(word)) {
		r.i += len(word)
		return true
	}
	return false
}

// strOrNull reads a string or null.
func (r *fastReader) strOrNull() (*string, bool) {
	if r.next() == 'n' {
		return nil, r.lit("null")
	}
	s, ok := r.str()
	if !ok {
		return nil, false
	}
	v := string(s)
	return &v, true
}

// rows reads null or an array of objects of strings or nulls.
func (r *fastReader) rows() ([]map[string]*string, bool) {
	if r.next() == 'n' {
		return nil, r.lit("null")
	}
	if !r.take('[') {
		return nil, false
	}
	out := []map[string]*string{}
	if r.take(']') {
		return out, true
	}
	for {
		if !r.take('{') {
			return nil, false
		}
		row := map[string]*string{}
		if !r.take('}') {
			for {
				k, ok := r.str()
				if !ok || !r.take(':') {
					return nil, false
				}
				v, ok := r.strOrNull()
				if !ok {
					return nil, false
				}
				row[string(k)] = v
				if r.take(',') {
					continue
				}
				if !r.take('}') {
					return nil, false
				}
				break
			}
		}
		out = append(out, row)
		if r.take(',') {
			continue
		}
		return out, r.take(']')
	}
}

// skip passes one value: a string, a plain number, true, false, null, or
// an object or array of them.
func (r *fastReader) skip(depth int) bool {
	if depth > 16 {
		return false
	}
	switch c := r.next(); {
	case c == '"':
		_, ok := r.str()
		return ok
	case c == 't':
		return r.lit("true")
	case c == 'f':
		return r.lit("false")
	case c == 'n':
		return r.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		if c == '-' {
			r.i++
			if r.i >= len(r.b) || r.b[r.i] < '0' || r.b[r.i] > '9' {
				return false
			}
		}
		_, ok := r.uint()
		return ok
	case c == '[':
		r.i++
		if r.take(']') {
			return true
		}
		for {
			if !r.skip(depth + 1) {
				return false
			}
			if r.take(',') {
				continue
			}
			return r.take(']')
		}
	case c == '{':
		r.i++
		if r.take('}') {
			return true
		}
		for {
			if _, ok := r.str(); !ok || !r.take(':') || !r.skip(depth+1) {
				return false
			}
			if r.take(',') {
				continue
			}
			return r.take('}')
		}
	}
	return false
}

// object reads null or an object, each member's value by value (false:
// not read).
func (r *fastReader) object(value func(k []byte) bool) bool {
	if r.next() == 'n' {
		return r.lit("null")
	}
	if !r.take('{') {
		return false
	}
	if r.take('}') {
		return true
	}
	for {
		k, ok := r.str()
		if !ok || !r.take(':') || !value(k) {
			return false
		}
		if r.take(',') {
			continue
		}
		return r.take('}')
	}
}

// uint reads a number written as digits only (no sign, fraction or
// exponent), without a leading zero, within 64 bits.
func (r *fastReader) uint() (uint64, bool) {
	r.ws()
	start := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	digits := r.b[start:r.i]
	if len(digits) == 0 || len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	if r.i < len(r.b) && (r.b[r.i] == '.' || r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseUint(string(digits), 10, 64)
	return n, err == nil
}
