package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cdcctl/cdcctl/internal/model"
)

// cascades warns of the replicated tables whose foreign keys cascade (ON
// DELETE or ON UPDATE CASCADE, SET NULL, SET DEFAULT): InnoDB changes the
// rows a cascade reaches itself, and the server writes no row events for
// them (PostgreSQL's WAL has them), so the sink keeps those rows as they
// were. What to do is the application's: change the rows itself, or make
// the key RESTRICT. Nothing when the catalog cannot be asked.
func cascades(ctx context.Context, db *sql.DB, tables []string) []string {
	if len(tables) == 0 {
		return nil
	}
	ours := map[string]bool{}
	var schemas, names []any
	for _, t := range tables {
		ours[t] = true
		s, n := model.SplitTableName(t)
		if !slices.Contains(schemas, any(s)) {
			schemas = append(schemas, s)
		}
		names = append(names, n)
	}
	// The tables' names too, where they are not too many for one query:
	// MariaDB opens every table of the databases named to read their
	// keys, this changefeed's or not, and this is asked on every
	// changefeed get (200 tables opened for 2 of them in a test).
	byName := ""
	args := schemas
	if len(names) <= 1000 {
		// BINARY: an IN of names equal in the catalog's collation
		// (Orders and orders) is read as its first name alone.
		byName = " AND BINARY TABLE_NAME IN (?" + strings.Repeat(", ?", len(names)-1) + ")"
		args = append(slices.Clip(schemas), names...)
	}
	rows, err := db.QueryContext(ctx, `SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE
FROM information_schema.REFERENTIAL_CONSTRAINTS
WHERE CONSTRAINT_SCHEMA IN (?`+strings.Repeat(", ?", len(schemas)-1)+`)`+byName+`
ORDER BY CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME`, args...)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []string
	seen := map[string]bool{} // table/constraint
	warn := func(t, name, refSchema, refTable, onDelete, onUpdate string) {
		restricts := func(r string) bool { return r == "RESTRICT" || r == "NO ACTION" }
		if restricts(onDelete) && restricts(onUpdate) {
			return
		}
		var rules []string
		if onDelete != "RESTRICT" && onDelete != "NO ACTION" {
			rules = append(rules, "ON DELETE "+onDelete)
		}
		if onUpdate != "RESTRICT" && onUpdate != "NO ACTION" {
			rules = append(rules, "ON UPDATE "+onUpdate)
		}
		out = append(out, fmt.Sprintf("%s: its foreign key %s to %s is %s, and the server writes no row events for the rows a cascade changes: the sink keeps them as they were (verify shows them); have the application change those rows itself, or make the key RESTRICT",
			t, name, model.TableName(refSchema, refTable), strings.Join(rules, ", ")))
	}
	for rows.Next() {
		var schema, table, name, refSchema, refTable, onDelete, onUpdate string
		if rows.Scan(&schema, &table, &name, &refSchema, &refTable, &onDelete, &onUpdate) != nil {
			return nil
		}
		t := model.TableName(schema, table)
		if !ours[t] {
			continue
		}
		seen[t+"/"+name] = true
		warn(t, name, refSchema, refTable, onDelete, onUpdate)
	}
	if rows.Err() != nil {
		return nil
	}
	rows.Close()
	// MariaDB shows REFERENTIAL_CONSTRAINTS empty to a user with only
	// SELECT on the tables (the grants docs/mysql.md asks for), and the
	// warning was never given to such a changefeed. KEY_COLUMN_USAGE
	// shows it the keys: those not seen above (every one, cascading or
	// not, is seen there by a user who may) are read from SHOW CREATE
	// TABLE, for at most showCreateMost tables a call (this runs for
	// every changefeed get); the rest are named with the grant that lets
	// the catalog say.
	if byName == "" {
		return sorted(out) // more tables than one query names: MariaDB would open all of them again
	}
	var unseen []string
	krows, err := db.QueryContext(ctx, `SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME, CONSTRAINT_NAME FROM information_schema.KEY_COLUMN_USAGE
WHERE TABLE_SCHEMA IN (?`+strings.Repeat(", ?", len(schemas)-1)+`)`+byName+` AND REFERENCED_TABLE_NAME IS NOT NULL`, args...)
	if err != nil {
		return sorted(out)
	}
	for krows.Next() {
		var schema, table, name string
		if krows.Scan(&schema, &table, &name) != nil {
			break
		}
		if t := model.TableName(schema, table); ours[t] && !seen[t+"/"+name] && !slices.Contains(unseen, t) {
			unseen = append(unseen, t)
		}
	}
	krows.Close()
	slices.Sort(unseen)
	if len(unseen) > showCreateMost {
		out = append(out, fmt.Sprintf("%d tables have foreign keys whose rules the changefeed's user cannot see (MariaDB shows a user with only SELECT no REFERENTIAL_CONSTRAINTS); %d were read from SHOW CREATE TABLE, not %s: a cascading key writes no row events, and the sink keeps the rows it changes; GRANT REFERENCES on them to the user to have each checked",
			len(unseen), showCreateMost, strings.Join(unseen[showCreateMost:], ", ")))
		unseen = unseen[:showCreateMost]
	}
	for _, t := range unseen {
		create, err := showCreate(ctx, db, t)
		if err != nil {
			continue
		}
		schema, _ := model.SplitTableName(t)
		for _, fk := range foreignKeysIn(create, schema) {
			if !seen[t+"/"+fk.name] {
				warn(t, fk.name, fk.refSchema, fk.refTable, fk.onDelete, fk.onUpdate)
			}
		}
	}
	return sorted(out)
}

// showCreateMost bounds the SHOW CREATE TABLE reads of one cascade check.
const showCreateMost = 64

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// showCreate is a table's SHOW CREATE TABLE with its names in
// backquotes, whatever the server's sql_mode (ANSI_QUOTES writes them in
// double quotes; sql_quote_show_create=0, bare): MariaDB's SET STATEMENT,
// else as the session is.
func showCreate(ctx context.Context, db *sql.DB, table string) (string, error) {
	var name, create string
	err := db.QueryRowContext(ctx, "SET STATEMENT sql_mode = '', sql_quote_show_create = 1 FOR SHOW CREATE TABLE "+quoteTable(table)).Scan(&name, &create)
	if err != nil {
		err = db.QueryRowContext(ctx, "SHOW CREATE TABLE "+quoteTable(table)).Scan(&name, &create)
	}
	return create, err
}

// foreignKey is a foreign key as SHOW CREATE TABLE writes it.
type foreignKey struct {
	name, refSchema, refTable, onDelete, onUpdate string
}

// createForeignKey matches a foreign key's line of SHOW CREATE TABLE:
// CONSTRAINT `name` FOREIGN KEY (`col`) REFERENCES [`db`.]`table` (`col`)
// [ON DELETE rule] [ON UPDATE rule]; a rule left out is RESTRICT.
var createForeignKey = regexp.MustCompile("(?m)^\\s*CONSTRAINT `((?:[^`]|``)+)` FOREIGN KEY \\((?:[^`)]|`(?:[^`]|``)*`)*\\) REFERENCES `((?:[^`]|``)+)`(?:\\.`((?:[^`]|``)+)`)? \\((?:[^`)]|`(?:[^`]|``)*`)*\\)([^\\n]*)$")

var fkRule = regexp.MustCompile(`ON (DELETE|UPDATE) (CASCADE|SET NULL|SET DEFAULT|NO ACTION|RESTRICT)`)

// foreignKeysIn lists the foreign keys of a table in schema from its SHOW
// CREATE TABLE.
func foreignKeysIn(create, schema string) []foreignKey {
	var out []foreignKey
	// The whole text, each key's line from its start: a name may hold a
	// newline, and a column's COMMENT may hold a key's words.
	for _, m := range createForeignKey.FindAllStringSubmatch(create, -1) {
		unquote := func(s string) string { return strings.ReplaceAll(s, "``", "`") }
		fk := foreignKey{name: unquote(m[1]), refSchema: schema, refTable: unquote(m[2]), onDelete: "RESTRICT", onUpdate: "RESTRICT"}
		if m[3] != "" {
			fk.refSchema, fk.refTable = unquote(m[2]), unquote(m[3])
		}
		for _, r := range fkRule.FindAllStringSubmatch(m[4], -1) {
			if r[1] == "DELETE" {
				fk.onDelete = r[2]
			} else {
				fk.onUpdate = r[2]
			}
		}
		out = append(out, fk)
	}
	return out
}
