package mysql

// The tokens of a statement the schema history reads (alter.go), and a
// reader over them: words, quoted identifiers, string literals and
// punctuation, comments left out.

import "strings"

// token is a word, a quoted identifier, a string literal or punctuation.
type token struct {
	text string
	kind byte // 'w' word, 'q' `quoted`, 's' 'string', 'p' punctuation
}

// tokenize splits a statement into tokens, leaving out comments. A
// conditional comment (/*! … */), whose text the server may run, is not
// read: false.
func tokenize(s string) ([]token, bool) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || c == '-' && strings.HasPrefix(s[i:], "-- "):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			if strings.HasPrefix(s[i:], "/*!") || strings.HasPrefix(s[i:], "/*M!") {
				return nil, false
			}
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return nil, false
			}
			i += end + 4
		case c == '`', c == '\'', c == '"':
			// A quoted identifier (`x`) or a string ('x', "x"): the quote
			// doubled stands for itself, and in a string a backslash
			// escapes the next byte.
			text, next, ok := quoted(s, i, c != '`')
			if !ok {
				return nil, false
			}
			kind := byte('s')
			if c == '`' {
				kind = 'q'
			}
			out = append(out, token{text, kind})
			i = next
		case isWordByte(c):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			out = append(out, token{s[i:j], 'w'})
			i = j
		default:
			out = append(out, token{string(c), 'p'})
			i++
		}
	}
	return out, true
}

// quoted reads the quoted text that begins at s[i] (its quote), and
// where it ends; false when it does not end.
func quoted(s string, i int, backslash bool) (string, int, bool) {
	q := s[i]
	var b strings.Builder
	for j := i + 1; j < len(s); j++ {
		switch {
		case backslash && s[j] == '\\' && j+1 < len(s):
			j++
		case s[j] == q && j+1 < len(s) && s[j+1] == q:
			j++
		case s[j] == q:
			return b.String(), j + 1, true
		}
		b.WriteByte(s[j])
	}
	return "", 0, false
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// alterReader reads tokens.
type alterReader struct {
	toks []token
	i    int
}

func (r *alterReader) peek(n int) token {
	if r.i+n < len(r.toks) {
		return r.toks[r.i+n]
	}
	return token{}
}

// is says whether the next tokens are these words (any case).
func (r *alterReader) is(words ...string) bool {
	for n, w := range words {
		t := r.peek(n)
		if t.kind != 'w' || !strings.EqualFold(t.text, w) {
			return false
		}
	}
	return true
}

// accept takes the words if they come next.
func (r *alterReader) accept(words ...string) bool {
	if r.is(words...) {
		r.i += len(words)
		return true
	}
	return false
}

// peekWord says whether the token n ahead is the word w.
func (r *alterReader) peekWord(n int, w string) bool {
	t := r.peek(n)
	return t.kind == 'w' && strings.EqualFold(t.text, w)
}

// peekPunct says the token n ahead is the punctuation p.
func (r *alterReader) peekPunct(n int, p string) bool {
	t := r.peek(n)
	return t.kind == 'p' && t.text == p
}

func (r *alterReader) punct(p string) bool {
	if t := r.peek(0); t.kind == 'p' && t.text == p {
		r.i++
		return true
	}
	return false
}

// name reads an identifier.
func (r *alterReader) name() (string, bool) {
	t := r.peek(0)
	if t.kind != 'w' && t.kind != 'q' || t.text == "" {
		return "", false
	}
	r.i++
	return t.text, true
}

// atSpecEnd says whether a clause ends here: a comma at the top level,
// or the statement's end.
func (r *alterReader) atSpecEnd() bool {
	t := r.peek(0)
	return t.kind == 0 || t.kind == 'p' && (t.text == "," || t.text == ";")
}

// skipGroup passes a parenthesised group whose '(' was just read.
func (r *alterReader) skipGroup() bool {
	for depth := 1; r.i < len(r.toks); r.i++ {
		if t := r.toks[r.i]; t.kind == 'p' {
			switch t.text {
			case "(":
				depth++
			case ")":
				if depth--; depth == 0 {
					r.i++
					return true
				}
			}
		}
	}
	return false
}

// skipSpec passes the rest of a clause.
func (r *alterReader) skipSpec() bool {
	for !r.atSpecEnd() {
		if r.punct("(") {
			if !r.skipGroup() {
				return false
			}
			continue
		}
		r.i++
	}
	return true
}
