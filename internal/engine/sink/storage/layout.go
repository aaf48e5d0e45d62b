package storage

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"path"
	"regexp"
	"strconv"

	"github.com/cdcctl/cdcctl/internal/engine/source"
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
}

// schemaFile returns the path and content of a table version's schema
// file. schemaVersion is the number of DDLs applied (gen adds a column c<i>
// per DDL); statement is the DDL that created it, if any.
func schemaFile(schema, table string, version model.Ts, schemaVersion uint64, statement string) (string, []byte) {
	cols := []tableColumn{
		{ColumnName: "id", ColumnType: "VARCHAR", ColumnPrecision: "16", ColumnIsPk: "true"},
		{ColumnName: "version", ColumnType: "BIGINT"},
		{ColumnName: "value", ColumnType: "VARCHAR", ColumnPrecision: "32"},
	}
	for c := uint64(1); c <= schemaVersion; c++ {
		cols = append(cols, tableColumn{ColumnName: fmt.Sprintf("c%d", c), ColumnType: "INT"})
	}
	body, _ := json.MarshalIndent(tableSchema{
		Table: table, Schema: schema, Version: 1, TableVersion: uint64(version), Query: statement,
		TableColumns: cols, TableColumnsTotal: len(cols),
	}, "", "    ")
	sum := crc32.ChecksumIEEE(body)
	return path.Join(schema, table, "meta", fmt.Sprintf("schema_%d_%010d.json", uint64(version), sum)), body
}

func schemaFileFor(schema string, e *source.Event) (string, []byte) {
	return schemaFile(schema, e.Table, e.TableVersion, e.Schema, e.Statement)
}

// metadataFile is the root checkpoint file.
const metadataFile = "metadata"

type metadata struct {
	CheckpointTs uint64 `json:"checkpoint-ts"`
}
