// Package compat reads the sinks' output the way a consumer written from
// the published format documents would: TiCDC's Canal-JSON and CSV
// protocol pages and Canal's FlatMessage. It shares nothing with package
// codec on purpose, so that a mistake made the same way by our encoder
// and our decoder cannot hide. Tests use it; the engine does not.
//
// It imports only the standard library.
package compat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// CanalMessage is one Canal-JSON message with the fields TiCDC
// documents; pointers tell a missing field from a zero one.
type CanalMessage struct {
	ID        *int64               `json:"id"`
	Database  *string              `json:"database"`
	Table     *string              `json:"table"`
	PkNames   []string             `json:"pkNames"`
	IsDdl     *bool                `json:"isDdl"`
	Type      *string              `json:"type"`
	Es        *int64               `json:"es"`
	Ts        *int64               `json:"ts"`
	SQL       *string              `json:"sql"`
	SQLType   map[string]int       `json:"sqlType"`
	MySQLType map[string]string    `json:"mysqlType"`
	Data      []map[string]*string `json:"data"`
	Old       []map[string]*string `json:"old"`
	TiDB      *struct {
		CommitTs    *uint64 `json:"commitTs"`
		WatermarkTs *uint64 `json:"watermarkTs"`
	} `json:"_tidb"`
}

// Table is what a consumer knows of a table before reading its rows;
// empty fields are not checked.
type Table struct {
	Database, Name string
	Columns, Keys  []string
}

// Row is what one row change says: its type (INSERT, UPDATE, DELETE),
// its key's values joined by commas, and its commit ts.
type Row struct {
	Type     string
	Key      string
	CommitTs uint64
}

// Watermark is TiCDC's TIDB_WATERMARK message type; DDL stands for any
// message with isDdl (its type names the statement's kind).
const (
	Watermark = "TIDB_WATERMARK"
	DDL       = "DDL"
)

// DecodeCanal decodes one Canal-JSON message and checks it against the
// documents: every field present, es the commit ts's physical part, one
// data row with every column in data, sqlType and mysqlType, old only on
// an UPDATE and then naming only columns that changed. A watermark
// message comes back as a Row of type Watermark with its ts.
func DecodeCanal(msg []byte, want Table) (Row, error) {
	var m CanalMessage
	dec := json.NewDecoder(bytes.NewReader(msg))
	if err := dec.Decode(&m); err != nil {
		return Row{}, fmt.Errorf("not a Canal-JSON message: %v", err)
	}
	if m.Type != nil && *m.Type == Watermark {
		if m.TiDB == nil || m.TiDB.WatermarkTs == nil || *m.TiDB.WatermarkTs == 0 {
			return Row{}, fmt.Errorf("a watermark without _tidb.watermarkTs")
		}
		return Row{Type: Watermark, CommitTs: *m.TiDB.WatermarkTs}, nil
	}
	if m.ID == nil || m.Database == nil || m.Table == nil || m.IsDdl == nil || m.Type == nil || m.Es == nil || m.Ts == nil ||
		m.TiDB == nil || m.TiDB.CommitTs == nil || *m.TiDB.CommitTs == 0 {
		return Row{}, fmt.Errorf("a documented field is missing")
	}
	if *m.IsDdl {
		if m.SQL == nil || *m.SQL == "" || m.Data != nil {
			return Row{}, fmt.Errorf("a DDL message without its statement, or with data")
		}
		return Row{Type: DDL, CommitTs: *m.TiDB.CommitTs}, nil
	}
	if want.Database != "" && *m.Database != want.Database || want.Name != "" && *m.Table != want.Name {
		return Row{}, fmt.Errorf("database.table %s.%s, want %s.%s", *m.Database, *m.Table, want.Database, want.Name)
	}
	if *m.Es != int64(*m.TiDB.CommitTs>>18) {
		return Row{}, fmt.Errorf("es %d is not the commit ts's physical part %d", *m.Es, *m.TiDB.CommitTs>>18)
	}
	if len(m.PkNames) == 0 || want.Keys != nil && strings.Join(m.PkNames, ",") != strings.Join(want.Keys, ",") {
		return Row{}, fmt.Errorf("pkNames %v, want %v", m.PkNames, want.Keys)
	}
	if len(m.Data) != 1 {
		return Row{}, fmt.Errorf("%d data rows, want 1", len(m.Data))
	}
	row := m.Data[0]
	cols := want.Columns
	if cols == nil {
		for c := range row {
			cols = append(cols, c)
		}
	}
	if len(row) != len(cols) {
		return Row{}, fmt.Errorf("data has %d columns, want %d", len(row), len(cols))
	}
	for _, c := range cols {
		_, inData := row[c]
		_, inMySQL := m.MySQLType[c]
		_, inSQL := m.SQLType[c]
		if !inData || !inMySQL || !inSQL {
			return Row{}, fmt.Errorf("column %s: in data %t, mysqlType %t, sqlType %t", c, inData, inMySQL, inSQL)
		}
	}
	switch *m.Type {
	case "INSERT", "DELETE":
		if m.Old != nil {
			return Row{}, fmt.Errorf("%s with old %v", *m.Type, m.Old)
		}
	case "UPDATE":
		if len(m.Old) != 1 {
			return Row{}, fmt.Errorf("UPDATE with %d old rows, want 1", len(m.Old))
		}
		for c, v := range m.Old[0] {
			nv, ok := row[c]
			if !ok || (v == nil) == (nv == nil) && (v == nil || *v == *nv) {
				return Row{}, fmt.Errorf("old names column %s, which did not change", c)
			}
		}
	default:
		return Row{}, fmt.Errorf("type %q", *m.Type)
	}
	var key []string
	for _, c := range m.PkNames {
		v, ok := row[c]
		if !ok || v == nil {
			return Row{}, fmt.Errorf("key column %s is missing or null", c)
		}
		key = append(key, *v)
	}
	return Row{Type: *m.Type, Key: strings.Join(key, ","), CommitTs: *m.TiDB.CommitTs}, nil
}

// DecodeCSV checks one record of TiCDC's CSV protocol (operation I, U or
// D; table; schema; commit ts; then the columns in the schema file's
// order, want.Columns) and returns its row, keyed by want.Keys.
func DecodeCSV(rec []string, want Table) (Row, error) {
	if len(rec) != 4+len(want.Columns) {
		return Row{}, fmt.Errorf("%d fields, want 4 + %d columns", len(rec), len(want.Columns))
	}
	types := map[string]string{"I": "INSERT", "U": "UPDATE", "D": "DELETE"}
	ts, err := strconv.ParseUint(rec[3], 10, 64)
	if types[rec[0]] == "" || rec[1] != want.Name || rec[2] != want.Database || err != nil || ts == 0 {
		return Row{}, fmt.Errorf("record %q is not op,table,schema,commit-ts for %s.%s", rec[:4], want.Database, want.Name)
	}
	var key []string
	for _, k := range want.Keys {
		i := -1
		for j, c := range want.Columns {
			if c == k {
				i = j
			}
		}
		if i < 0 {
			return Row{}, fmt.Errorf("key column %s is not a column", k)
		}
		key = append(key, rec[4+i])
	}
	return Row{Type: types[rec[0]], Key: strings.Join(key, ","), CommitTs: ts}, nil
}
