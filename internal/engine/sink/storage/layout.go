package storage

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/engine/sink/codec"
	"github.com/cdcctl/cdcctl/internal/model"
)

// versionDir is <schema>/<table>/<table-version>.
func versionDir(schema, table string, version model.Ts) string {
	return path.Join(schema, table, strconv.FormatUint(uint64(version), 10))
}

func dataFile(dir, dispatcher string, index uint64, ext string) string {
	return path.Join(dir, fmt.Sprintf("CDC_%s_%06d.%s", dispatcher, index, ext))
}

func indexFile(dir, dispatcher string) string {
	return path.Join(dir, "meta", fmt.Sprintf("CDC_%s.index", dispatcher))
}

// dataFileName matches a data file and captures dispatcher and index.
var dataFileName = regexp.MustCompile(`^CDC_(.+)_(\d{6,})\.(json|csv)$`)

// tableSchema is the schema file: TiCDC's table definition, enough for a
// consumer to create the table at that version.
type tableSchema struct {
	Table             string        `json:"Table"`
	Schema            string        `json:"Schema"`
	Version           int           `json:"Version"`
	TableVersion      uint64        `json:"TableVersion"`
	Query             string        `json:"Query"`
	TableColumns      []tableColumn `json:"TableColumns"`
	TableColumnsTotal int           `json:"TableColumnsTotal"`
}

type tableColumn struct {
	ColumnName      string `json:"ColumnName"`
	ColumnType      string `json:"ColumnType"`
	ColumnPrecision string `json:"ColumnPrecision,omitempty"`
	ColumnNullable  string `json:"ColumnNullable,omitempty"`
	ColumnIsPk      string `json:"ColumnIsPk,omitempty"`
	// ColumnKeyPos is cdcctl's addition: the column's place in the key,
	// written only when the key's order is not the columns' (a key
	// declared (b, a)), so TiCDC's files stay as they were otherwise.
	ColumnKeyPos int `json:"ColumnKeyPos,omitempty"`
}

// schemaFile returns the path and content of a table version's schema
// file, its columns from the table's definition; statement is the DDL
// that created the version, if any.
func schemaFile(schema, table string, version model.Ts, def *row.TableDef, statement string) (string, []byte) {
	cols := make([]tableColumn, 0, len(def.Columns))
	keyOutOfOrder, last := false, 0
	for _, c := range def.Columns {
		if c.KeyPos > 0 {
			keyOutOfOrder = keyOutOfOrder || c.KeyPos < last
			last = c.KeyPos
		}
	}
	for _, c := range def.Columns {
		typ, prec := columnTypeOf(def.Dialect, c.Type)
		tc := tableColumn{ColumnName: c.Name, ColumnType: typ, ColumnPrecision: prec}
		if c.Nullable {
			tc.ColumnNullable = "true"
		}
		if c.KeyPos > 0 {
			tc.ColumnIsPk = "true"
			if keyOutOfOrder {
				tc.ColumnKeyPos = c.KeyPos
			}
		}
		cols = append(cols, tc)
	}
	body, _ := json.MarshalIndent(tableSchema{
		Table: table, Schema: schema, Version: 1, TableVersion: uint64(version), Query: statement,
		TableColumns: cols, TableColumnsTotal: len(cols),
	}, "", "    ")
	sum := crc32.ChecksumIEEE(body)
	return path.Join(schema, table, "meta", fmt.Sprintf("schema_%d_%010d.json", uint64(version), sum)), body
}

// csvColumns names a table version's CSV values: its columns, and its
// key's in key order.
func (s *tableSchema) csvColumns() codec.CSVColumns {
	var cc codec.CSVColumns
	var key []tableColumn
	for _, c := range s.TableColumns {
		cc.Names = append(cc.Names, c.ColumnName)
		if c.ColumnIsPk == "true" {
			key = append(key, c)
		}
	}
	// Stable: without ColumnKeyPos the key is in column order.
	sort.SliceStable(key, func(i, j int) bool { return key[i].ColumnKeyPos < key[j].ColumnKeyPos })
	for _, c := range key {
		cc.PkNames = append(cc.PkNames, c.ColumnName)
	}
	return cc
}

// columnTypeOf splits TiCDC's schema-file type ("VARCHAR", "INT
// UNSIGNED") from its precision ("16"); an ENUM's or SET's members are
// not a precision.
func columnTypeOf(dialect, upstream string) (string, string) {
	t := codec.MySQLType(dialect, upstream)
	base, rest, paren := strings.Cut(t, "(")
	if b := strings.ToLower(strings.TrimSpace(base)); b == "enum" || b == "set" {
		return strings.ToUpper(b), ""
	}
	if !paren {
		return strings.ToUpper(strings.TrimSpace(t)), ""
	}
	prec, suffix, _ := strings.Cut(rest, ")")
	return strings.ToUpper(strings.TrimSpace(base + suffix)), prec
}

func schemaFileFor(sinkSchema string, e *row.Event) (string, []byte) {
	db, table := codec.Names(sinkSchema, e)
	return schemaFile(db, table, e.TableVersion, e.Def, e.Statement)
}

// dirOf is the directory of an event's table version.
func dirOf(sinkSchema string, e *row.Event) string {
	db, table := codec.Names(sinkSchema, e)
	return versionDir(db, table, e.TableVersion)
}

// txnDir holds the transactions' BEGIN and END records (transaction-meta),
// one JSON object per line, in data files named as a table's; readers of
// the tables' directories (<schema>/<table>/<version>/) pass it over.
const txnDir = "cdcctl-transaction"

// metadataFile is the root checkpoint file.
const metadataFile = "metadata"

type metadata struct {
	CheckpointTs uint64 `json:"checkpoint-ts"`
}
