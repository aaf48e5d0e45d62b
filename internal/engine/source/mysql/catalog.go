package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// queryer is a pool or one of its connections.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// tableDef reads a table's definition from the catalog: its columns in
// order with their full types ("int(10) unsigned", "decimal(65,30)",
// "enum('a','b')"), nullability and primary key positions. The binary
// log names neither columns nor (without binlog_row_metadata=FULL)
// signedness, enum values or charsets: rows are decoded against this.
//
// charsets are the character columns' character sets, by column index
// (latin1 bytes in the log are not the UTF-8 the server sends for them).
// errNoTable is a table the catalog does not show.
var errNoTable = errors.New("does not exist (or the user cannot read it)")

func tableDef(ctx context.Context, db queryer, table string) (def *source.TableDef, charsets map[int]string, err error) {
	st, err := readTable(ctx, db, table)
	return st.Def, st.Charsets, err
}

// readTable is tableDef as a table's state, with the table's default
// character set: the set of a character column that a later ALTER TABLE
// adds without naming one, which the schema history must know as it was
// then, not as the catalog shows it when a lagging reader meets that
// statement.
func readTable(ctx context.Context, db queryer, table string) (tableState, error) {
	schema, name := model.SplitTableName(table)
	// The constants on TABLES as well as on COLUMNS: MariaDB opens only
	// the tables its information_schema query names by constants.
	rows, err := db.QueryContext(ctx, `SELECT c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE, COALESCE(k.ORDINAL_POSITION, 0), COALESCE(c.CHARACTER_SET_NAME, ''), COALESCE(l.CHARACTER_SET_NAME, '')
FROM information_schema.COLUMNS c
JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
LEFT JOIN information_schema.COLLATIONS l ON l.COLLATION_NAME = t.TABLE_COLLATION
LEFT JOIN information_schema.KEY_COLUMN_USAGE k
  ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY'
WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ? AND t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ?
ORDER BY c.ORDINAL_POSITION`, schema, name, schema, name)
	if err != nil {
		return tableState{}, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	defer rows.Close()
	st := tableState{Def: &source.TableDef{Schema: schema, Name: name, Dialect: source.DialectMySQL}}
	for rows.Next() {
		var c source.ColumnDef
		var nullable, charset string
		if err := rows.Scan(&c.Name, &c.Type, &nullable, &c.KeyPos, &charset, &st.DefaultCharset); err != nil {
			return tableState{}, fmt.Errorf("read the columns of %s: %w", table, err)
		}
		c.Nullable = nullable == "YES"
		if charset = utf8As4(charset); charset != "" && charset != "utf8mb4" {
			if st.Charsets == nil {
				st.Charsets = map[int]string{}
			}
			st.Charsets[len(st.Def.Columns)] = charset
		}
		st.Def.Columns = append(st.Def.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return tableState{}, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	if len(st.Def.Columns) == 0 {
		return tableState{}, fmt.Errorf("table %s %w", table, errNoTable)
	}
	st.DefaultCharset = utf8As4(st.DefaultCharset)
	return st, nil
}

// utf8As4 names every UTF-8 set as utf8mb4: none of them is recoded.
func utf8As4(charset string) string {
	if charset == "utf8" || charset == "utf8mb3" {
		return "utf8mb4"
	}
	return charset
}
