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
	// Three queries, each naming the table by constants in its WHERE:
	// MariaDB opens only the tables an information_schema query names so
	// (EXPLAIN: "Scanned 0 databases"). Joined, as one query, the
	// conditions KEY_COLUMN_USAGE got from COLUMNS were not constants,
	// and MariaDB opened every table of every database for each call
	// ("Open_full_table; Scanned all databases"): 10-16 ms on a server
	// with a few tables, 35-120 ms with 1,000 more, and the snapshot
	// reads a table's definition before each chunk.
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COALESCE(CHARACTER_SET_NAME, '')
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
ORDER BY ORDINAL_POSITION`, schema, name)
	if err != nil {
		return tableState{}, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	defer rows.Close()
	st := tableState{Def: &source.TableDef{Schema: schema, Name: name, Dialect: source.DialectMySQL}}
	for rows.Next() {
		var c source.ColumnDef
		var nullable, charset string
		if err := rows.Scan(&c.Name, &c.Type, &nullable, &charset); err != nil {
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
	rows.Close() // before the next query: db may be one connection
	if len(st.Def.Columns) == 0 {
		return tableState{}, fmt.Errorf("table %s %w", table, errNoTable)
	}
	if err := readKeyPositions(ctx, db, schema, name, st.Def); err != nil {
		return tableState{}, fmt.Errorf("read the primary key of %s: %w", table, err)
	}
	if st.DefaultCharset, err = defaultCharset(ctx, db, schema, name); errors.Is(err, errNoTable) {
		return tableState{}, err
	} else if err != nil {
		return tableState{}, fmt.Errorf("read the default character set of %s: %w", table, err)
	}
	return st, nil
}

// readKeyPositions sets the position in the primary key of each of def's
// columns in it.
func readKeyPositions(ctx context.Context, db queryer, schema, name string, def *source.TableDef) error {
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, ORDINAL_POSITION FROM information_schema.KEY_COLUMN_USAGE
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY'`, schema, name)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var col string
		var pos int
		if err := rows.Scan(&col, &pos); err != nil {
			return err
		}
		if i := def.Index(col); i >= 0 { // the same bytes: the same table's definition
			def.Columns[i].KeyPos = pos
		}
	}
	return rows.Err()
}

// defaultCharset is a table's default character set in the catalog ("":
// the catalog shows none), UTF-8 named utf8mb4; errNoTable where the
// catalog shows no such table (readTable asks it last: a table dropped
// while it read the columns and the key fails the read).
func defaultCharset(ctx context.Context, db queryer, schema, name string) (string, error) {
	// A uca1400 collation (MariaDB 10.10+) has no row in COLLATIONS under
	// its full name (utf8mb4_uca1400_ai_ci): its set is its name's first
	// part, as every collation's is.
	rows, err := db.QueryContext(ctx, `SELECT COALESCE(c.CHARACTER_SET_NAME, SUBSTRING_INDEX(t.TABLE_COLLATION, '_', 1), '') FROM information_schema.TABLES t
LEFT JOIN information_schema.COLLATIONS c ON c.COLLATION_NAME = t.TABLE_COLLATION
WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ?`, schema, name)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", err
		}
		return "", fmt.Errorf("table %s %w", model.TableName(schema, name), errNoTable)
	}
	var cs string
	if err := rows.Scan(&cs); err != nil {
		return "", err
	}
	return utf8As4(cs), rows.Err()
}

// utf8As4 names every UTF-8 set as utf8mb4: none of them is recoded.
func utf8As4(charset string) string {
	if charset == "utf8" || charset == "utf8mb3" {
		return "utf8mb4"
	}
	return charset
}
