package codec

import (
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/model"
)

// The canal-json row encoder, without reflection: encoding/json spent a
// fifth of a PostgreSQL changefeed's CPU sorting and encoding the maps of
// canalRow. It writes byte for byte what json.Marshal makes of canalRow
// (TestCanalEncoderMatchesEncodingJSON and its fuzz target hold it to
// that): fields in struct order, map keys sorted, strings escaped alike.

// defLayout is what every row of one table definition shares: its
// columns in name order (the maps' key order) and their canal types.
type defLayout struct {
	order   []int  // column indexes sorted by name
	binary  []bool // the column's text is bytes (bytesType)
	bits    []int  // a MySQL BIT(n) column's n (canalbits.go), else 0
	sqlType []string
	myType  []string // quoted
	names   []string // quoted
	pkNames []byte   // the encoded pkNames array
	// types is `"sqlType":{…},"mysqlType":{…}` of every column: a row
	// with none absent (most) writes it whole, not column by column.
	types []byte
}

// layouts caches each table definition's layout. A definition is a new
// pointer after every DDL, so the cache is bounded: past maxLayouts it is
// emptied and refilled by the definitions in use (a miss costs one sort
// of a table's columns).
var (
	layouts     sync.Map // *row.TableDef -> *defLayout
	layoutCount atomic.Int64
)

const maxLayouts = 4096

func layoutOf(def *row.TableDef) *defLayout {
	if l, ok := layouts.Load(def); ok {
		return l.(*defLayout)
	}
	l := &defLayout{order: make([]int, len(def.Columns))}
	for i, c := range def.Columns {
		l.order[i] = i
		t := typeIn(def.Dialect, c.Type)
		l.sqlType = append(l.sqlType, strconv.Itoa(t.sqlType))
		l.binary = append(l.binary, bytesType(t.sqlType))
		l.bits = append(l.bits, bitWidth(t.mysqlType))
		l.myType = append(l.myType, string(appendJSONString(nil, t.mysqlType)))
		l.names = append(l.names, string(appendJSONString(nil, c.Name)))
	}
	// Insertion sort by name: tables have tens of columns.
	for i := 1; i < len(l.order); i++ {
		for j := i; j > 0 && def.Columns[l.order[j]].Name < def.Columns[l.order[j-1]].Name; j-- {
			l.order[j], l.order[j-1] = l.order[j-1], l.order[j]
		}
	}
	l.types = l.appendTypes(nil, nil)
	if keys := def.KeyNames(); keys == nil {
		l.pkNames = []byte("null")
	} else {
		l.pkNames = append(l.pkNames, '[')
		for i, k := range keys {
			if i > 0 {
				l.pkNames = append(l.pkNames, ',')
			}
			l.pkNames = appendJSONString(l.pkNames, k)
		}
		l.pkNames = append(l.pkNames, ']')
	}
	if layoutCount.Add(1) > maxLayouts {
		layouts.Clear()
		layoutCount.Store(1)
	}
	actual, _ := layouts.LoadOrStore(def, l)
	return actual.(*defLayout)
}

// appendCanalRow appends the canal-json message of a DML (no newline).
func appendCanalRow(b []byte, db, table string, e *row.Event, img []row.Value) []byte {
	l := layoutOf(e.Def)
	b = append(b, `{"id":0,"database":`...)
	b = appendJSONString(b, db)
	b = append(b, `,"table":`...)
	b = appendJSONString(b, table)
	b = append(b, `,"pkNames":`...)
	b = append(b, l.pkNames...)
	b = append(b, `,"isDdl":false,"type":"`...)
	b = append(b, e.Op.String()...)
	b = append(b, `","es":`...)
	// Written in place and copied, not formatted into a string of its
	// own: that was an allocation a row (3 % of a storage sink's CPU).
	at := len(b)
	b = strconv.AppendInt(b, e.CommitTs.Millis(), 10)
	ms := len(b)
	b = append(b, `,"ts":`...)
	b = append(b, b[at:ms]...)
	b = append(b, `,"sql":"",`...)
	absent := false
	for i := range img {
		absent = absent || img[i].Unchanged
	}
	if absent {
		b = l.appendTypes(b, img)
	} else {
		b = append(b, l.types...)
	}
	b = append(b, `,"data":[{`...)
	first := true
	for _, i := range l.order {
		if img[i].Unchanged {
			continue
		}
		b = appendKey(b, &first, l.names[i])
		b = appendValue(b, img[i], l.binary[i], l.bits[i])
	}
	b = append(b, `}],"old":`...)
	if e.Op == row.OpUpdate && len(e.Old) == len(img) {
		// The columns an update changed, as they were.
		b = append(b, `[{`...)
		first = true
		for _, i := range l.order {
			o, n := e.Old[i], img[i]
			if o.Unchanged || n.Unchanged || (o.Null == n.Null && o.Text == n.Text) {
				continue
			}
			b = appendKey(b, &first, l.names[i])
			b = appendValue(b, o, l.binary[i], l.bits[i])
		}
		b = append(b, `}]`...)
	} else {
		b = append(b, `null`...)
	}
	b = append(b, `,"_tidb":{"commitTs":`...)
	b = strconv.AppendUint(b, uint64(e.CommitTs), 10)
	b = append(b, '}')
	first = true
	for i := range img {
		if !img[i].Unchanged {
			continue
		}
		if first {
			b = append(b, `,"_cdcctl":{"absent":[`...)
		} else {
			b = append(b, ',')
		}
		first = false
		b = append(b, l.names[i]...)
	}
	if !first {
		b = append(b, `]}`...)
	}
	if e.TxnOrder > 0 {
		b = appendTxnPosition(b, e)
	}
	return append(b, '}')
}

// appendTypes appends the sqlType and mysqlType maps of the columns of
// img present (of every column, img nil).
func (l *defLayout) appendTypes(b []byte, img []row.Value) []byte {
	b = append(b, `"sqlType":{`...)
	first := true
	for _, i := range l.order {
		if img != nil && img[i].Unchanged {
			continue
		}
		b = appendKey(b, &first, l.names[i])
		b = append(b, l.sqlType[i]...)
	}
	b = append(b, `},"mysqlType":{`...)
	first = true
	for _, i := range l.order {
		if img != nil && img[i].Unchanged {
			continue
		}
		b = appendKey(b, &first, l.names[i])
		b = append(b, l.myType[i]...)
	}
	return append(b, '}')
}

func appendKey(b []byte, first *bool, quoted string) []byte {
	if !*first {
		b = append(b, ',')
	}
	*first = false
	b = append(b, quoted...)
	return append(b, ':')
}

func appendValue(b []byte, v row.Value, binary bool, bits int) []byte {
	if v.Null {
		return append(b, `null`...)
	}
	if bits > 0 {
		if t, ok := bitsText(v.Text); ok {
			return appendJSONString(b, t)
		}
	}
	if binary || bits > 0 {
		return appendJSONString(b, model.Latin1(v.Text))
	}
	return appendJSONString(b, v.Text)
}

// bytesType says a column of this canal type code holds bytes, not text:
// BINARY, VARBINARY, the BLOBs and MySQL's geometries (PostgreSQL's
// bytea too, whose text is its hex, in ASCII).
func bytesType(code int) bool {
	return code == sqlBinary || code == sqlVarBinary || code == sqlBlob
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does with HTML escaping on
// (its default): <, > and & as \u003c..., U+2028 and U+2029 escaped,
// control characters as \n, \r, \t, \b, \f or \u00XX, invalid UTF-8 as
// U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
