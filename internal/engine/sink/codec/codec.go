// Package codec encodes rows in the wire formats sinks write, TiCDC's
// canal-json (with the TiDB extension carrying the commit ts) and CSV, and
// decodes them back for verify. Sinks and verify share it, so a format is
// spelled in one place.
//
// It imports model and engine/row only.
package codec

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/model"
)

// canalRow is TiCDC's canal-json message with its TiDB extension (the
// commit ts), one per line. Values are the upstream's text form; SQL NULL
// is JSON null.
type canalRow struct {
	ID        int                  `json:"id"`
	Database  string               `json:"database"`
	Table     string               `json:"table"`
	PkNames   []string             `json:"pkNames"`
	IsDdl     bool                 `json:"isDdl"`
	Type      string               `json:"type"`
	Es        int64                `json:"es"`
	Ts        int64                `json:"ts"`
	SQL       string               `json:"sql"`
	SQLType   map[string]int       `json:"sqlType"`
	MySQLType map[string]string    `json:"mysqlType"`
	Data      []map[string]*string `json:"data"`
	Old       []map[string]*string `json:"old"`
	TiDB      canalTiDB            `json:"_tidb"`
	// CDC is cdcctl's addition, only when a row has columns the upstream
	// did not send (left out of data): their names, in column order.
	CDC *canalCDC `json:"_cdcctl,omitempty"`
	// Transaction is the row's place in its source transaction, with a
	// sink's transaction-meta (transaction.go).
	Transaction *canalTxn `json:"transaction,omitempty"`
}

// canalTxn is Debezium's transaction block of a row.
type canalTxn struct {
	ID                  string `json:"id"`
	TotalOrder          uint32 `json:"total_order"`
	DataCollectionOrder uint32 `json:"data_collection_order"`
}

// canalChange is what reading a row change back needs of a canal-json
// message: the rest (the type maps above all, two maps a row) is passed
// over, and lines as this codec writes them are read without
// encoding/json (fastjson.go): 2.2–2.3 times as fast as decoding the
// whole message (BenchmarkDecodeChanges).
type canalChange struct {
	Database string               `json:"database"`
	Table    string               `json:"table"`
	PkNames  []string             `json:"pkNames"`
	IsDdl    bool                 `json:"isDdl"`
	Type     string               `json:"type"`
	Binary   binaryColumns        `json:"sqlType"`
	Bits     bitColumns           `json:"mysqlType"`
	Data     []map[string]*string `json:"data"`
	Old      []map[string]*string `json:"old"`
	TiDB     canalTiDB            `json:"_tidb"`
	// Transaction is the row's place in its source transaction
	// (transaction-meta); nil without.
	Transaction *TxnPlace `json:"transaction"`
}

// binaryColumns are the columns of a message's sqlType whose values are
// bytes (bytesType): only these matter to a reader, so the rest are not
// kept (a map of every column per line cost a fifth of verify's
// decoding); nil when there are none.
type binaryColumns map[string]bool

func (b *binaryColumns) UnmarshalJSON(data []byte) error {
	var types map[string]int
	if err := json.Unmarshal(data, &types); err != nil {
		return err
	}
	for name, code := range types {
		b.add(name, code)
	}
	return nil
}

// add keeps name if its type code is a binary one.
func (b *binaryColumns) add(name string, code int) { keepColumn(b, name, true, bytesType(code)) }

// keepColumn sets name to v in *m if keep, else drops it (a repeated
// name: the last counts); none left is nil, as encoding/json leaves it.
func keepColumn[M ~map[string]V, V any](m *M, name string, v V, keep bool) {
	if !keep {
		if *m != nil {
			if delete(*m, name); len(*m) == 0 {
				*m = nil
			}
		}
		return
	}
	if *m == nil {
		*m = M{}
	}
	(*m)[name] = v
}

// TxnPlace is a row's "transaction" block: its transaction's id, and its
// place in the transaction and among the transaction's rows of its table
// (both from 1).
type TxnPlace struct {
	ID         string `json:"id"`
	TotalOrder int    `json:"total_order"`
	TableOrder int    `json:"data_collection_order"`
}

type canalTiDB struct {
	CommitTs uint64 `json:"commitTs"`
}

type canalCDC struct {
	Absent []string `json:"absent"`
}

// csvNull is how TiCDC's CSV writes SQL NULL.
const csvNull = `\N`

// CSVUnchanged is what the CSV protocol writes for a value the upstream
// did not send: an update left it unchanged (PostgreSQL's TOASTed
// columns under the default replica identity; a consumer keeps the value
// it has), or a delete sent only its key. An empty field would be a real
// empty string, \N NULL (docs/postgres.md).
const CSVUnchanged = "__cdcctl_unchanged_toast__"

// csvOp is TiCDC's CSV operation column.
func csvOp(op row.Op) string {
	switch op {
	case row.OpInsert:
		return "I"
	case row.OpDelete:
		return "D"
	}
	return "U"
}

// Names returns the database and table a sink shows for an event: the
// upstream's schema, or the sink's configured one when the source has
// none.
func Names(sinkSchema string, e *row.Event) (string, string) {
	if e.Def == nil {
		return sinkSchema, e.Table
	}
	db := e.Def.Schema
	if db == "" {
		db = sinkSchema
	}
	return db, e.Def.Name
}

// EncodeRow appends one row in the protocol's format. Everything about
// the columns (names, types, key) comes from the event's table
// definition.
func EncodeRow(buf *bytes.Buffer, p Protocol, schema string, e *row.Event) error {
	if e.Def == nil {
		return fmt.Errorf("codec: a DML of %s has no table definition", e.Table)
	}
	db, table := Names(schema, e)
	img := e.Image()
	if len(img) != len(e.Def.Columns) {
		return fmt.Errorf("codec: a row of %s has %d values for %d columns", e.Table, len(img), len(e.Def.Columns))
	}
	if p == ProtocolCSV {
		// TiCDC's CSV: operation, table, schema, commit ts, then columns.
		w := csv.NewWriter(buf)
		rec := make([]string, 0, 4+len(img))
		rec = append(rec, csvOp(e.Op), table, db, strconv.FormatUint(uint64(e.CommitTs), 10))
		for _, v := range img {
			if v.Null {
				rec = append(rec, csvNull)
			} else if v.Unchanged {
				rec = append(rec, CSVUnchanged)
			} else {
				rec = append(rec, v.Text)
			}
		}
		if err := w.Write(rec); err != nil {
			return err
		}
		w.Flush()
		return w.Error()
	}
	buf.Write(appendCanalRow(buf.AvailableBuffer(), db, table, e, img))
	buf.WriteByte('\n')
	return nil
}

// Protocol is a wire format.
type Protocol string

const (
	ProtocolCanalJSON Protocol = "canal-json"
	ProtocolCSV       Protocol = "csv"
)

// Ext is the data file extension of a protocol.
func (p Protocol) Ext() string {
	if p == ProtocolCSV {
		return "csv"
	}
	return "json"
}

// Row is one decoded row of a gen table, as verify needs it: the key's
// change number (its "version" column; a delete carries the row it
// deleted, so its change is one more) and payload.
type Row struct {
	Table    string
	Op       string // INSERT, UPDATE or DELETE
	Key      string
	Version  uint64
	CommitTs model.Ts
	Value    string
	// TableVersion is the table version whose files hold the row (a
	// storage sink's directory); 0 where the sink has none (Kafka).
	TableVersion uint64
}

// genRow finishes a decoded row: a delete is the change after the row it
// carries.
func genRow(table, op, key, version, value string, ts model.Ts) (Row, error) {
	v, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		return Row{}, fmt.Errorf("bad version %q", version)
	}
	if op == "DELETE" {
		v++
	}
	return Row{Table: table, Op: op, Key: key, Version: v, CommitTs: ts, Value: value}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// DecodeRows reads every row of one file or message, in order.
func DecodeRows(p Protocol, data []byte) ([]Row, error) {
	var out []Row
	if p == ProtocolCSV {
		r := csv.NewReader(bytes.NewReader(data))
		r.FieldsPerRecord = -1
		recs, err := r.ReadAll()
		if err != nil {
			return nil, err
		}
		ops := map[string]string{"I": "INSERT", "U": "UPDATE", "D": "DELETE"}
		for i, rec := range recs {
			if len(rec) < 7 {
				return nil, fmt.Errorf("csv record %d has %d fields, want at least 7", i+1, len(rec))
			}
			ts, err := strconv.ParseUint(rec[3], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("csv record %d: bad commit ts %q", i+1, rec[3])
			}
			op, ok := ops[rec[0]]
			if !ok {
				return nil, fmt.Errorf("csv record %d: bad operation %q", i+1, rec[0])
			}
			row, err := genRow(rec[1], op, rec[4], rec[5], rec[6], model.Ts(ts))
			if err != nil {
				return nil, fmt.Errorf("csv record %d: %v", i+1, err)
			}
			out = append(out, row)
		}
		return out, nil
	}
	err := eachCanalRow(data, func(m *canalChange) error {
		d := m.Data[0]
		row, err := genRow(m.Table, m.Type, deref(d["id"]), deref(d["version"]), deref(d["value"]), model.Ts(m.TiDB.CommitTs))
		out = append(out, row)
		return err
	})
	return out, err
}

// eachCanalRow decodes the single-row DML messages of a canal-json file,
// one a line, in order.
func eachCanalRow(data []byte, fn func(m *canalChange) error) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m canalChange
		if err := decodeCanalChange(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("line %d: %v", line, err)
		}
		if m.IsDdl || len(m.Data) != 1 {
			return fmt.Errorf("line %d: not a single-row DML message", line)
		}
		if err := fn(&m); err != nil {
			return fmt.Errorf("line %d: %v", line, err)
		}
	}
	return sc.Err()
}

// Change is one decoded row change of any table, as a consumer rebuilding
// the upstream's tables needs it.
type Change struct {
	Database string
	Table    string
	Op       string // INSERT, UPDATE or DELETE
	PkNames  []string
	// Data is the row image: the row after an insert or update, the
	// deleted row of a delete. A column left out was not sent (an
	// unchanged PostgreSQL TOAST value; a delete's non-key column under
	// the default replica identity); nil is SQL NULL.
	Data map[string]*string
	// Old holds the old values of the columns an update changed.
	Old      map[string]*string
	CommitTs model.Ts
	// NoOld says the format carries no old values (CSV): an update of a
	// table without a key cannot be matched to the row it changed.
	NoOld bool
	// Txn is the row's place in its source transaction, when the sink
	// writes transaction boundaries (transaction-meta).
	Txn *TxnPlace
}

// Key is the change's primary key: the key columns' values in key order,
// as model.JoinKeyTexts names a row.
func (c *Change) Key() string {
	parts := make([]string, len(c.PkNames))
	for i, n := range c.PkNames {
		parts[i] = deref(c.Data[n])
	}
	return model.JoinKeyTexts(parts)
}

// DecodeChanges reads every row change of one canal-json file, in order.
// CSV carries no column names: DecodeCSVChanges reads it with the
// columns of its table version's schema file.
func DecodeChanges(p Protocol, data []byte) ([]Change, error) {
	if p != ProtocolCanalJSON {
		return nil, fmt.Errorf("DecodeChanges reads canal-json; %s needs its table version's columns (DecodeCSVChanges)", p)
	}
	var out []Change
	err := eachCanalRow(data, func(m *canalChange) error {
		c := Change{Database: m.Database, Table: m.Table, Op: m.Type, PkNames: m.PkNames, Data: m.Data[0], CommitTs: model.Ts(m.TiDB.CommitTs), Txn: m.Transaction}
		if len(m.Old) > 0 {
			c.Old = m.Old[0]
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// CSVColumns names a CSV data file's values (the fields after the
// operation, table, schema and commit position): its table version's
// columns in order, and the key's columns in key order.
type CSVColumns struct {
	Names   []string
	PkNames []string
}

// csvOps are TiCDC's CSV operations.
var csvOps = map[string]string{"I": "INSERT", "U": "UPDATE", "D": "DELETE"}

// DecodeCSVChanges reads every row change of one CSV data file, in
// order, naming its values with its table version's columns. \N is SQL
// NULL; a CSVUnchanged field is left out of the change's data, as
// canal-json leaves an unchanged value out (the consumer keeps the value
// it has). CSV carries no old values, so every change has NoOld set.
func DecodeCSVChanges(data []byte, cols CSVColumns) ([]Change, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	var out []Change
	for n := 1; ; n++ {
		rec, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(rec) != 4+len(cols.Names) {
			return nil, fmt.Errorf("csv record %d has %d fields; its table version has %d columns, so want %d", n, len(rec), len(cols.Names), 4+len(cols.Names))
		}
		op, ok := csvOps[rec[0]]
		if !ok {
			return nil, fmt.Errorf("csv record %d: bad operation %q (want I, U or D)", n, rec[0])
		}
		ts, err := strconv.ParseUint(rec[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("csv record %d: bad commit ts %q", n, rec[3])
		}
		c := Change{Database: rec[2], Table: rec[1], Op: op, PkNames: cols.PkNames, Data: make(map[string]*string, len(cols.Names)), CommitTs: model.Ts(ts), NoOld: true}
		for i, name := range cols.Names {
			switch v := rec[4+i]; v {
			case csvNull:
				c.Data[name] = nil
			case CSVUnchanged:
			default:
				c.Data[name] = &v
			}
		}
		out = append(out, c)
	}
}
