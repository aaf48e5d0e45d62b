package source

import "github.com/cdcctl/cdcctl/internal/engine/row"

// The row model is package row's; sources name it here too, so a source
// sees one contract.
type (
	Kind      = row.Kind
	Op        = row.Op
	ColumnDef = row.ColumnDef
	TableDef  = row.TableDef
	Value     = row.Value
	Event     = row.Event

	TxnSummary = row.TxnSummary
	Arena      = row.Arena
	TableCount = row.TableCount
)

const (
	KindDML  = row.KindDML
	KindDDL  = row.KindDDL
	KindMark = row.KindMark
	KindTxn  = row.KindTxn
	OpInsert = row.OpInsert
	OpUpdate = row.OpUpdate
	OpDelete = row.OpDelete

	TruncatePrefix = row.TruncatePrefix
	DropPrefix     = row.DropPrefix

	DialectMySQL = row.DialectMySQL
)

// Null is SQL NULL.
var Null = row.Null

// Text returns a non-null value.
func Text(s string) Value { return row.Text(s) }

// RenameStatement is row.RenameStatement.
func RenameStatement(from, to string) string { return row.RenameStatement(from, to) }

// EndsTable is row.EndsTable.
func EndsTable(stmt string) bool { return row.EndsTable(stmt) }

// IsTruncate is row.IsTruncate.
func IsTruncate(e *Event) bool { return row.IsTruncate(e) }
