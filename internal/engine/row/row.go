// Package row is the row-change model every source produces and every
// sink writes: events (row changes, schema changes), their values and the
// table definitions they are read with. It knows only model, so sinks and
// sources share it without knowing each other.
package row

import (
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// Kind says what an event is.
type Kind uint8

const (
	KindDML Kind = iota + 1 // a row change of one key
	KindDDL                 // a schema change of one table
	// KindMark is a watermark of a database source's snapshot in its
	// event log (Statement holds it): readers that copy rows stop at it;
	// dispatchers never see one.
	KindMark
	// KindTxn is a source transaction's summary (Txn holds it), for sinks
	// that write transaction boundaries (a sink's transaction-meta): the
	// event log adds one per transaction at its commit, routed like the
	// transaction's first row (Table and Key are that row's), so exactly
	// one partition gets it.
	KindTxn
)

func (k Kind) String() string {
	switch k {
	case KindDML:
		return "DML"
	case KindDDL:
		return "DDL"
	case KindMark:
		return "Mark"
	case KindTxn:
		return "Txn"
	}
	return "Kind(?)"
}

// Op is what a DML did to its row.
type Op uint8

const (
	OpInsert Op = iota + 1
	OpUpdate
	OpDelete
)

// String is the operation as canal-json names it.
func (o Op) String() string {
	switch o {
	case OpInsert:
		return "INSERT"
	case OpUpdate:
		return "UPDATE"
	case OpDelete:
		return "DELETE"
	}
	return "Op(?)"
}

// ColumnDef is one column of a table version, as the upstream defines it.
type ColumnDef struct {
	Name string `json:"name"`
	// Type is the upstream's type name with its modifiers, e.g. "int8",
	// "numeric(10,2)", "varchar(16)", "_int4" (an int4 array).
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
	// KeyPos is the column's 1-based position in the primary key; 0 when
	// it is not part of it.
	KeyPos int `json:"key_pos,omitempty"`
}

// TableDef is one version of a table's definition. Events of one version
// share one value: it must not be changed once an event carries it.
type TableDef struct {
	// Schema is the upstream schema (PostgreSQL's namespace); empty when
	// the source has none, and sinks then use their configured one.
	Schema  string      `json:"schema,omitempty"`
	Name    string      `json:"name"`
	Columns []ColumnDef `json:"columns"`
	// Dialect names whose type names Columns carry: "" for PostgreSQL's
	// (and the generator's), DialectMySQL for MySQL's COLUMN_TYPE
	// ("int(10) unsigned"), which canal-json passes on as they are.
	Dialect string `json:"dialect,omitempty"`
}

// DialectMySQL is TableDef.Dialect for MySQL's and MariaDB's types.
const DialectMySQL = "mysql"

// KeyNames are the primary key's columns in key order.
func (d *TableDef) KeyNames() []string {
	var out []string
	for pos := 1; ; pos++ {
		found := false
		for _, c := range d.Columns {
			if c.KeyPos == pos {
				out = append(out, c.Name)
				found = true
				break
			}
		}
		if !found {
			return out
		}
	}
}

// Index is the position of a column by name, or -1.
func (d *TableDef) Index(name string) int {
	for i, c := range d.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// Value is one column's value in the upstream's text form (PostgreSQL's
// output format: "t" for true, "\x0a" for bytea, "{1,2}" for an array).
type Value struct {
	Text string
	// Null is SQL NULL; Text is then empty.
	Null bool
	// Unchanged marks a value the upstream did not send: it did not
	// change and is stored out of line (a PostgreSQL TOAST value), or it
	// is a non-key column of a delete under the default replica identity;
	// sinks leave it out of the row image.
	Unchanged bool
}

// Text returns a non-null value.
func Text(s string) Value { return Value{Text: s} }

// Null is SQL NULL.
var Null = Value{Null: true}

// Event is one change: a DML of one row, or a DDL of one table. The
// events of one transaction share a CommitTs, which totally orders a
// changefeed's commits; its physical part is the commit time (for lag).
type Event struct {
	Kind Kind
	// Table is the table as the changefeed's partitions name it (gen:
	// "t0001"; a database: "schema.table").
	Table    string
	CommitTs model.Ts
	// Def is the table's definition the event belongs to: for a DML the
	// version the row was written under, for a DDL the version it
	// creates. Values in New and Old are in its column order.
	Def *TableDef
	// SchemaVersion counts the table's schema changes before Def: 0 for
	// the version the changefeed started with.
	SchemaVersion uint64
	// TableVersion is when that schema version began: the commit ts of
	// the DDL that created it, or the source's start for the first one.
	// Storage sinks name directories after it.
	TableVersion model.Ts

	// DML only.
	Op Op
	// Key is the row's primary key in text form (composite keys joined by
	// commas); partitions route on it and Kafka keys messages by it.
	Key string
	// New is the row after an insert or update; nil for a delete.
	New []Value
	// Old is the row before an update or delete, as far as the upstream
	// tells it (at least the key of a delete); nil when unknown.
	Old []Value
	// TxnOrder is the row's place in its source transaction, from 1, over
	// every table (Debezium's total_order); TxnTableOrder its place among
	// the transaction's rows of its table (data_collection_order). Both 0
	// when the changefeed does not ask for transaction boundaries, and
	// for rows of the initial snapshot, which belong to no transaction.
	TxnOrder, TxnTableOrder uint32

	// Txn is a KindTxn event's summary.
	Txn *TxnSummary

	// DDL only.
	Statement string
}

// TxnSummary is what a sink writes at a source transaction's boundaries:
// how many rows it has, in all and by table. Its id is its commit ts,
// which the transaction's rows carry too (TxnID).
type TxnSummary struct {
	// SourceID is the transaction's id at the source, when it tells one
	// (PostgreSQL: "xid:commit LSN"; MySQL: its GTID, MariaDB:
	// domain-server-sequence; without GTIDs: binlog file:position). A
	// source passes it to its event log as a KindTxn event at the end of
	// the transaction's Append, with only this set.
	SourceID string `json:",omitempty"`
	Events   int
	// Tables are the counts by table, in the order the transaction first
	// wrote each table.
	Tables []TableCount
}

// TableCount is how many rows of a transaction belong to one table.
type TableCount struct {
	Table  string
	Events int
}

// TxnID is a source transaction's id as sinks write it: its commit ts in
// decimal, unique within a changefeed and ordered as the commits are.
func TxnID(ts model.Ts) string { return strconv.FormatUint(uint64(ts), 10) }

// Image is the row a sink shows for a DML: the new row, or for a delete
// the old one.
func (e *Event) Image() []Value {
	if e.Op == OpDelete {
		return e.Old
	}
	return e.New
}

// Size is about how many bytes the event's values take, for metrics and
// buffers.
func (e *Event) Size() int {
	n := len(e.Key) + len(e.Statement)
	for _, v := range e.New {
		n += len(v.Text)
	}
	for _, v := range e.Old {
		n += len(v.Text)
	}
	return n
}

// TruncatePrefix starts the statement of a schema change that empties its
// table (TRUNCATE): a new table version with the same columns, and no row
// before it survives.
const TruncatePrefix = "TRUNCATE TABLE "

// DropPrefix begins the statement of a DDL event that ends a table: it
// was dropped upstream, and nothing of it comes after.
const DropPrefix = "DROP TABLE "

// RenameStatement is the statement of a DDL event that ends a table's
// name: renamed upstream to another (schema.table names, as
// model.TableName writes them).
func RenameStatement(from, to string) string {
	fs, ft := model.SplitTableName(from)
	ts, tt := model.SplitTableName(to)
	if fs == ts {
		return "ALTER TABLE " + from + " RENAME TO " + model.TableName("", tt)
	}
	return "ALTER TABLE " + from + " SET SCHEMA " + model.TableName("", ts) + "; ALTER TABLE " + model.TableName(ts, ft) + " RENAME TO " + model.TableName("", tt)
}

// EndsTable says a DDL statement ends its table under this name: a
// DROP, or a rename (RenameStatement); the rows it had are gone from it.
func EndsTable(stmt string) bool {
	return strings.HasPrefix(stmt, DropPrefix) || strings.HasPrefix(stmt, "ALTER TABLE ") && (strings.Contains(stmt, " RENAME TO ") || strings.Contains(stmt, " SET SCHEMA "))
}

// IsTruncate says a DDL event empties its table.
func IsTruncate(e *Event) bool {
	return e.Kind == KindDDL && strings.HasPrefix(e.Statement, TruncatePrefix)
}
