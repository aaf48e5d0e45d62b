// Package codec encodes rows in the wire formats sinks write, TiCDC's
// canal-json (with the TiDB extension carrying the commit ts) and CSV, and
// decodes them back for verify. Sinks and verify share it, so a format is
// spelled in one place.
//
// It imports model and source only.
package codec

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// canalRow is TiCDC's canal-json message with its TiDB extension (the
// commit ts), one per line.
type canalRow struct {
	ID        int                 `json:"id"`
	Database  string              `json:"database"`
	Table     string              `json:"table"`
	PkNames   []string            `json:"pkNames"`
	IsDdl     bool                `json:"isDdl"`
	Type      string              `json:"type"`
	Es        int64               `json:"es"`
	Ts        int64               `json:"ts"`
	SQL       string              `json:"sql"`
	SQLType   map[string]int      `json:"sqlType"`
	MySQLType map[string]string   `json:"mysqlType"`
	Data      []map[string]string `json:"data"`
	Old       []map[string]string `json:"old"`
	TiDB      canalTiDB           `json:"_tidb"`
}

type canalTiDB struct {
	CommitTs uint64 `json:"commitTs"`
}

// java.sql.Types codes canal-json carries.
const sqlTypeVarchar, sqlTypeInt = 12, 4

func rowType(e *source.Event) string {
	if e.Version == 1 {
		return "INSERT"
	}
	return "UPDATE"
}

// EncodeRow appends one row in the protocol's format.
func EncodeRow(buf *bytes.Buffer, p Protocol, schema string, e *source.Event) error {
	if p == ProtocolCSV {
		// TiCDC's CSV: operation, table, schema, commit ts, then columns.
		w := csv.NewWriter(buf)
		rec := []string{"I", e.Table, schema, strconv.FormatUint(uint64(e.CommitTs), 10)}
		if e.Version > 1 {
			rec[0] = "U"
		}
		for _, c := range e.Columns {
			rec = append(rec, c.Value)
		}
		if err := w.Write(rec); err != nil {
			return err
		}
		w.Flush()
		return w.Error()
	}
	data := make(map[string]string, len(e.Columns))
	sqlType := make(map[string]int, len(e.Columns))
	mysqlType := make(map[string]string, len(e.Columns))
	for _, c := range e.Columns {
		data[c.Name] = c.Value
		if c.Name == "id" || c.Name == "value" {
			sqlType[c.Name], mysqlType[c.Name] = sqlTypeVarchar, "varchar"
		} else {
			sqlType[c.Name], mysqlType[c.Name] = sqlTypeInt, "int"
		}
	}
	ms := e.CommitTs.Millis()
	b, err := json.Marshal(canalRow{
		Database: schema, Table: e.Table, PkNames: []string{"id"}, Type: rowType(e), Es: ms, Ts: ms,
		SQLType: sqlType, MySQLType: mysqlType, Data: []map[string]string{data}, TiDB: canalTiDB{CommitTs: uint64(e.CommitTs)},
	})
	if err != nil {
		return err
	}
	buf.Write(b)
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

// Row is one decoded row, as verify needs it.
type Row struct {
	Table    string
	Key      string
	Version  uint64
	CommitTs model.Ts
	Value    string
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
		for i, rec := range recs {
			if len(rec) < 7 {
				return nil, fmt.Errorf("csv record %d has %d fields, want at least 7", i+1, len(rec))
			}
			ts, err1 := strconv.ParseUint(rec[3], 10, 64)
			v, err2 := strconv.ParseUint(rec[5], 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("csv record %d: bad commit ts or version", i+1)
			}
			out = append(out, Row{Table: rec[1], CommitTs: model.Ts(ts), Key: rec[4], Version: v, Value: rec[6]})
		}
		return out, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m canalRow
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		if m.IsDdl || len(m.Data) != 1 {
			return nil, fmt.Errorf("line %d: not a single-row DML message", line)
		}
		v, err := strconv.ParseUint(m.Data[0]["version"], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: bad version %q", line, m.Data[0]["version"])
		}
		out = append(out, Row{Table: m.Table, Key: m.Data[0]["id"], Version: v, CommitTs: model.Ts(m.TiDB.CommitTs), Value: m.Data[0]["value"]})
	}
	return out, sc.Err()
}
