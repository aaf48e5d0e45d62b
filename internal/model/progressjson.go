package model

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// ProgressEntry is one partition's position in a stored positions table.
type ProgressEntry struct {
	Partition string
	Progress  Progress
}

// DecodeProgressEntries decodes a stored positions table (a progress
// shard) as json.Unmarshal into a ProgressTable does, as a list (a key
// given twice: the last counts, as in the map). Every node's view decodes
// every shard a maintainer writes, and in a drain of 20,000 partitions
// that was 9 % of the cluster's CPU, most of it encoding/json's
// reflection and a map for records of one or two partitions, which the
// view then copies into a map of its own. The exact form json.Marshal
// writes (no spaces, fields in declaration order, omitted when empty) is
// read by hand; any other JSON goes to encoding/json, so the result never
// differs.
func DecodeProgressEntries(b []byte) ([]ProgressEntry, error) {
	if es, ok := decodeProgressFast(b); ok {
		return es, nil
	}
	var t ProgressTable
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, err
	}
	es := make([]ProgressEntry, 0, len(t))
	for pid, p := range t {
		es = append(es, ProgressEntry{pid, p})
	}
	return es, nil
}

// progressScan reads the form json.Marshal gives a ProgressTable; ok
// goes false at the first byte it does not expect.
type progressScan struct {
	b  []byte
	i  int
	ok bool
}

func decodeProgressFast(b []byte) ([]ProgressEntry, bool) {
	s := progressScan{b: b, ok: true}
	s.lit("{")
	t := make([]ProgressEntry, 0, bytes.Count(b, []byte(`{"checkpoint":`)))
	if s.peek('}') {
		s.i++
	} else {
		for s.ok {
			pid := s.str()
			s.lit(":")
			p := s.progress()
			if !s.ok {
				return nil, false
			}
			t = append(t, ProgressEntry{pid, p})
			if s.peek(',') {
				s.i++
				continue
			}
			s.lit("}")
			break
		}
	}
	if !s.ok || s.i != len(b) {
		return nil, false
	}
	return t, true
}

// progress reads one Progress: its fields in order, the optional ones
// only when json.Marshal writes them.
func (s *progressScan) progress() Progress {
	var p Progress
	s.lit(`{"checkpoint":`)
	p.Checkpoint = Ts(s.uint())
	s.lit(`,"node":`)
	p.Node = NodeID(s.str())
	s.lit(`,"epoch":`)
	p.Epoch = s.uint()
	if s.field(`,"final":`) {
		s.lit("true")
		p.Final = true
	}
	if s.field(`,"handover":`) {
		s.lit("true")
		p.Handover = true
	}
	if s.field(`,"copy":`) {
		s.lit("{")
		sep := ""
		if s.field(`"to":`) {
			p.Copy.To, sep = s.str(), ","
		}
		if s.field(sep + `"done":`) {
			s.lit("true")
			p.Copy.Done, sep = true, ","
		}
		if s.field(sep + `"rows":`) {
			rows := s.uint()
			if rows > 1<<63-1 {
				s.ok = false
			}
			p.Copy.Rows = int64(rows)
		}
		s.lit("}")
	}
	s.lit("}")
	return p
}

func (s *progressScan) peek(c byte) bool {
	return s.ok && s.i < len(s.b) && s.b[s.i] == c
}

// field consumes lit if it comes next.
func (s *progressScan) field(lit string) bool {
	if !s.ok || len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// lit consumes lit, which must come next.
func (s *progressScan) lit(lit string) {
	if !s.field(lit) {
		s.ok = false
	}
}

// uint reads an unsigned integer as json.Marshal writes one: no sign,
// no leading zero, no fraction or exponent.
func (s *progressScan) uint() uint64 {
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

// str reads a string. Escapes other than \u of a character outside the
// surrogates, and text that is not UTF-8 (which encoding/json replaces),
// are left to encoding/json.
func (s *progressScan) str() string {
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

func (s *progressScan) unescape(raw []byte) string {
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
