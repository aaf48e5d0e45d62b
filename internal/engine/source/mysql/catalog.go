package mysql

import (
	"context"
	"database/sql"
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
func tableDef(ctx context.Context, db queryer, table string) (def *source.TableDef, charsets map[int]string, err error) {
	schema, name := model.SplitTableName(table)
	rows, err := db.QueryContext(ctx, `SELECT c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE, COALESCE(k.ORDINAL_POSITION, 0), COALESCE(c.CHARACTER_SET_NAME, '')
FROM information_schema.COLUMNS c
LEFT JOIN information_schema.KEY_COLUMN_USAGE k
  ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY'
WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ?
ORDER BY c.ORDINAL_POSITION`, schema, name)
	if err != nil {
		return nil, nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	defer rows.Close()
	def = &source.TableDef{Schema: schema, Name: name, Dialect: source.DialectMySQL}
	for rows.Next() {
		var c source.ColumnDef
		var nullable, charset string
		if err := rows.Scan(&c.Name, &c.Type, &nullable, &c.KeyPos, &charset); err != nil {
			return nil, nil, fmt.Errorf("read the columns of %s: %w", table, err)
		}
		c.Nullable = nullable == "YES"
		if charset != "" && charset != "utf8mb4" && charset != "utf8mb3" && charset != "utf8" {
			if charsets == nil {
				charsets = map[int]string{}
			}
			charsets[len(def.Columns)] = charset
		}
		def.Columns = append(def.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	if len(def.Columns) == 0 {
		return nil, nil, fmt.Errorf("table %s does not exist (or the user cannot read it)", table)
	}
	return def, charsets, nil
}
