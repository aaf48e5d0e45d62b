package codec

import (
	"bytes"
	"encoding/json"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Reading a canal-json row change back (verify reads every row of a
// sink) through encoding/json costs a reflection walk and an allocation
// per value. fastCanalChange reads the lines this codec writes directly:
// the fields canalChange has, their strings without escapes. Anything
// else (an escape, a key that only differs in letter case from a field,
// a value of another shape) makes it give up, and the line is read by
// encoding/json instead, so what is read is always what encoding/json
// reads (FuzzFastCanalChange holds the two to that).

// decodeCanalChange reads one line into m.
func decodeCanalChange(line []byte, m *canalChange) error {
	if !fastCanalChange(line, m) {
		*m = canalChange{}
		if err := json.Unmarshal(line, m); err != nil {
			return err
		}
	}
	unLatin1(m)
	return nil
}

// unLatin1 turns the values of binary columns (sqlType) back into their
// bytes (model.Latin1), and those of BIT columns (mysqlType) from their
// number (canalbits.go).
func unLatin1(m *canalChange) {
	for name, width := range m.Bits {
		m.replace(name, func(v string) (string, bool) { return bitsValue(v, width) })
	}
	for name := range m.Binary {
		m.replace(name, model.FromLatin1)
	}
}

// replace puts into the message's rows the value of column name that
// from makes of its value, where it makes one.
func (m *canalChange) replace(name string, from func(string) (string, bool)) {
	for _, rows := range [][]map[string]*string{m.Data, m.Old} {
		for _, r := range rows {
			if v := r[name]; v != nil {
				if b, ok := from(*v); ok {
					r[name] = &b
				}
			}
		}
	}
}

// once reads an object member that may come once: encoding/json reads a
// repeated object into the same map, which is left to it.
func once(seen *bool, read func() bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return read()
}

// bitColumns reads mysqlType, null or an object of strings, into the BIT
// columns it names.
func (r *fastReader) bitColumns(b *bitColumns) bool {
	return r.object(func(k []byte) bool {
		v, ok := r.str()
		if ok {
			b.add(string(k), string(v))
		}
		return ok
	})
}

// binaryColumns reads sqlType, null or an object of integers (no
// fraction or exponent, within an int's 64 bits), into the binary
// columns it names.
func (r *fastReader) binaryColumns(b *binaryColumns) bool {
	return r.object(func(k []byte) bool {
		neg := r.take('-')
		if neg && (r.i >= len(r.b) || r.b[r.i] < '0' || r.b[r.i] > '9') {
			return false // JSON has no space after a minus
		}
		n, ok := r.uint()
		if !ok || n > 1<<63-1 {
			return false
		}
		code := int(n)
		if neg {
			code = -code
		}
		b.add(string(k), code)
		return true
	})
}

// fields are canalChange's keys; a key that equals one but for letter
// case is read by encoding/json instead (it matches such keys too).
var canalFields = []string{"database", "table", "pkNames", "isDdl", "type", "sqlType", "mysqlType", "data", "old", "_tidb", "transaction"}

func foldsToField(k []byte) bool {
	for _, f := range canalFields {
		if bytes.EqualFold(k, []byte(f)) {
			return true
		}
	}
	return false
}

// fastCanalChange reads a line as this codec writes it; false when the
// line has anything else (then nothing it set counts).
func fastCanalChange(line []byte, m *canalChange) bool {
	*m = canalChange{}
	r := &fastReader{b: line}
	if !r.take('{') {
		return false
	}
	seenData, seenOld, seenTypes, seenMyTypes := false, false, false, false
	if !r.take('}') {
		for {
			k, ok := r.str()
			if !ok || !r.take(':') {
				return false
			}
			switch string(k) {
			case "database", "table", "type":
				if r.next() == 'n' {
					// null leaves a string field as it was
					if !r.lit("null") {
						return false
					}
					break
				}
				s, ok := r.str()
				if !ok {
					return false
				}
				switch string(k) {
				case "database":
					m.Database = string(s)
				case "table":
					m.Table = string(s)
				default:
					m.Type = string(s)
				}
			case "pkNames":
				if r.next() == 'n' {
					if !r.lit("null") {
						return false
					}
					m.PkNames = nil
					break
				}
				if !r.take('[') {
					return false
				}
				names := []string{}
				if !r.take(']') {
					for {
						s, ok := r.str()
						if !ok {
							return false
						}
						names = append(names, string(s))
						if r.take(',') {
							continue
						}
						if !r.take(']') {
							return false
						}
						break
					}
				}
				m.PkNames = names
			case "isDdl":
				switch {
				case r.lit("true"):
					m.IsDdl = true
				case r.lit("false"):
					m.IsDdl = false
				default:
					return false
				}
			case "mysqlType":
				if !once(&seenMyTypes, func() bool { return r.bitColumns(&m.Bits) }) {
					return false
				}
			case "sqlType":
				if !once(&seenTypes, func() bool { return r.binaryColumns(&m.Binary) }) {
					return false
				}
			case "data", "old":
				// encoding/json merges a repeated array of objects into
				// the maps it already made: leave that to it.
				if string(k) == "data" && seenData || string(k) == "old" && seenOld {
					return false
				}
				seenData, seenOld = seenData || string(k) == "data", seenOld || string(k) == "old"
				rows, ok := r.rows()
				if !ok {
					return false
				}
				if string(k) == "data" {
					m.Data = rows
				} else {
					m.Old = rows
				}
			case "_tidb":
				if !r.take('{') {
					return false
				}
				if !r.take('}') {
					for {
						tk, ok := r.str()
						if !ok || !r.take(':') {
							return false
						}
						if string(tk) == "commitTs" {
							n, ok := r.uint()
							if !ok {
								return false
							}
							m.TiDB.CommitTs = n
						} else if bytes.EqualFold(tk, []byte("commitTs")) || !r.skip(0) {
							return false
						}
						if r.take(',') {
							continue
						}
						if !r.take('}') {
							return false
						}
						break
					}
				}
			case "transaction":
				if m.Transaction != nil || !r.txnPlace(m) {
					return false
				}
			default:
				if foldsToField(k) || !r.skip(0) {
					return false
				}
			}
			if r.take(',') {
				continue
			}
			if !r.take('}') {
				return false
			}
			break
		}
	}
	r.ws()
	return r.i == len(r.b)
}

// txnPlace reads a row's transaction block as this codec writes it.
func (r *fastReader) txnPlace(m *canalChange) bool {
	if !r.take('{') {
		return false
	}
	t := &TxnPlace{}
	if !r.take('}') {
		for {
			k, ok := r.str()
			if !ok || !r.take(':') {
				return false
			}
			switch string(k) {
			case "id":
				s, ok := r.str()
				if !ok {
					return false
				}
				t.ID = string(s)
			case "total_order", "data_collection_order":
				n, ok := r.uint()
				if !ok || n > 1<<31 {
					return false
				}
				if string(k) == "total_order" {
					t.TotalOrder = int(n)
				} else {
					t.TableOrder = int(n)
				}
			default:
				return false // encoding/json decides
			}
			if r.take(',') {
				continue
			}
			if !r.take('}') {
				return false
			}
			break
		}
	}
	m.Transaction = t
	return true
}
