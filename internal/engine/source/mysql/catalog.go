package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// tableDef reads a table's definition from the catalog: its columns in
// order with their full types ("int(10) unsigned", "decimal(65,30)",
// "enum('a','b')"), nullability and primary key positions. The binary
// log names neither columns nor (without binlog_row_metadata=FULL)
// signedness, enum values or charsets: rows are decoded against this.
func tableDef(ctx context.Context, db *sql.DB, table string) (*source.TableDef, error) {
	schema, name := model.SplitTableName(table)
	rows, err := db.QueryContext(ctx, `SELECT c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE, COALESCE(k.ORDINAL_POSITION, 0)
FROM information_schema.COLUMNS c
LEFT JOIN information_schema.KEY_COLUMN_USAGE k
  ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY'
WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ?
ORDER BY c.ORDINAL_POSITION`, schema, name)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	defer rows.Close()
	def := &source.TableDef{Schema: schema, Name: name}
	for rows.Next() {
		var c source.ColumnDef
		var nullable string
		if err := rows.Scan(&c.Name, &c.Type, &nullable, &c.KeyPos); err != nil {
			return nil, fmt.Errorf("read the columns of %s: %w", table, err)
		}
		c.Nullable = nullable == "YES"
		def.Columns = append(def.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	if len(def.Columns) == 0 {
		return nil, fmt.Errorf("table %s does not exist (or the user cannot read it)", table)
	}
	return def, nil
}
