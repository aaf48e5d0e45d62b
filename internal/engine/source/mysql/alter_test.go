package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

func shopOrders() *source.TableDef {
	return &source.TableDef{Schema: "shop", Name: "orders", Dialect: source.DialectMySQL, Columns: []source.ColumnDef{
		{Name: "id", Type: "bigint(20)", KeyPos: 1},
		{Name: "note", Type: "varchar(20)", Nullable: true},
		{Name: "qty", Type: "int(11)", Nullable: true},
	}}
}

// describe writes a definition as the tests compare it: each column's
// name, type, NOT NULL, KEY and character set when not UTF-8.
func describe(def *source.TableDef, charsets map[int]string) string {
	var out []string
	for i, c := range def.Columns {
		s := c.Name + " " + c.Type
		if !c.Nullable {
			s += " not null"
		}
		if c.KeyPos > 0 {
			s += fmt.Sprintf(" key%d", c.KeyPos)
		}
		if cs := charsets[i]; cs != "" {
			s += " " + cs
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// Each ALTER TABLE is applied to the schema held as the server applies
// it; a clause that changes no column changes nothing; one this reader
// does not follow is refused (the catalog decides then), and one that
// renames the table or changes its key says so.
func TestAnAlterTableIsAppliedToTheSchemaHeld(t *testing.T) {
	latin1 := func() (string, bool) { return "latin1", true }
	utf8 := func() (string, bool) { return "utf8mb4", true }
	for _, c := range []struct {
		stmt, want string
		def        func() (string, bool)
	}{
		{stmt: "ALTER TABLE orders ADD COLUMN extra INT", want: "id bigint(20) not null key1, note varchar(20), qty int(11), extra int(11)"},
		{stmt: "alter table `shop`.`orders` add `when` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) AFTER id", want: "id bigint(20) not null key1, when datetime(6) not null, note varchar(20), qty int(11)"},
		{stmt: "ALTER TABLE orders ADD COLUMN a TINYINT UNSIGNED FIRST, ADD b DECIMAL, ADD c FLOAT(30), ADD d BOOL DEFAULT -1 COMMENT 'x, y'", want: "a tinyint(3) unsigned, id bigint(20) not null key1, note varchar(20), qty int(11), b decimal(10,0), c double, d tinyint(1)"},
		{stmt: "ALTER TABLE orders ADD (x INT NOT NULL, y ENUM('a','b''c') CHARACTER SET latin1)", want: "id bigint(20) not null key1, note varchar(20), qty int(11), x int(11) not null, y enum('a','b''c') latin1"},
		{stmt: "ALTER TABLE orders DROP COLUMN note, DROP IF EXISTS nothing", want: "id bigint(20) not null key1, qty int(11)"},
		{stmt: "ALTER TABLE orders MODIFY note VARCHAR(60) NOT NULL", want: "id bigint(20) not null key1, note varchar(60) not null, qty int(11)", def: utf8},
		{stmt: "ALTER TABLE orders MODIFY note VARCHAR(60)", want: "id bigint(20) not null key1, note varchar(60) latin1, qty int(11)", def: latin1},
		{stmt: "ALTER TABLE orders CHANGE COLUMN qty amount DECIMAL(12,2) UNSIGNED ZEROFILL FIRST", want: "amount decimal(12,2) unsigned zerofill, id bigint(20) not null key1, note varchar(20)"},
		{stmt: "ALTER TABLE orders RENAME COLUMN note TO memo, ALGORITHM=INPLACE, LOCK=NONE", want: "id bigint(20) not null key1, memo varchar(20), qty int(11)"},
		{stmt: "ALTER TABLE orders ADD INDEX (qty), DROP INDEX i, ENGINE=InnoDB, ALTER COLUMN qty SET DEFAULT 3, COMMENT 'c'", want: "id bigint(20) not null key1, note varchar(20), qty int(11)"},
		{stmt: "ALTER TABLE orders /* a comment */ ADD COLUMN j JSON -- why\n", want: "id bigint(20) not null key1, note varchar(20), qty int(11), j longtext", def: utf8},
		{stmt: "ALTER TABLE orders ADD COLUMN t TEXT COLLATE latin1_german1_ci, ADD COLUMN n NATIONAL VARCHAR(3), ADD COLUMN z TIME(0)", want: "id bigint(20) not null key1, note varchar(20), qty int(11), t text latin1, n varchar(3), z time"},
		{stmt: "ALTER TABLE orders ADD COLUMN b1 BLOB(50), ADD COLUMN b2 BLOB(300), ADD COLUMN b3 BLOB(70000), ADD COLUMN b4 BLOB, ADD COLUMN t2 TINYTEXT", want: "id bigint(20) not null key1, note varchar(20), qty int(11), b1 tinyblob, b2 blob, b3 mediumblob, b4 blob, t2 tinytext", def: utf8},
		{stmt: "ALTER TABLE orders ADD COLUMN t TEXT(50)", want: "refused"},
		{stmt: "ALTER TABLE orders ADD COLUMN IF NOT EXISTS qty BIGINT", want: "id bigint(20) not null key1, note varchar(20), qty int(11)"},
		{stmt: "ALTER TABLE orders ADD COLUMN v VARCHAR(5)", want: "refused", def: func() (string, bool) { return "", false }},

		{stmt: "ALTER TABLE orders ADD COLUMN qty INT", want: "refused"},
		{stmt: "ALTER TABLE orders DROP COLUMN nothing", want: "refused"},
		{stmt: "ALTER TABLE orders ADD COLUMN g INT AS (qty * 2) VIRTUAL", want: "refused"},
		{stmt: "ALTER TABLE orders CONVERT TO CHARACTER SET latin1", want: "refused"},
		{stmt: "ALTER TABLE orders ADD COLUMN s SERIAL", want: "refused"},
		{stmt: "ALTER TABLE orders SOMETHING NEW", want: "refused"},
		{stmt: "/*!40000 ALTER TABLE orders DISABLE KEYS */", want: "refused"},
		{stmt: "ALTER TABLE orders ADD COLUMN x INT AFTER nothing", want: "refused"},
		{stmt: "ALTER TABLE orders ADD COLUMN 'x' INT", want: "refused"},

		{stmt: "ALTER TABLE orders ADD PRIMARY KEY (id, qty)", want: "key"},
		{stmt: "ALTER TABLE orders DROP PRIMARY KEY, ADD CONSTRAINT pk PRIMARY KEY (qty)", want: "key"},
		{stmt: "ALTER TABLE orders ADD COLUMN k INT KEY", want: "key"},
		{stmt: "ALTER TABLE orders RENAME TO orders_v2", want: "renamed"},
		{stmt: "ALTER TABLE orders RENAME INDEX a TO b", want: "id bigint(20) not null key1, note varchar(20), qty int(11)"},
		{stmt: "ALTER TABLE orders DROP INDEX `PRIMARY`, ADD PRIMARY KEY (qty)", want: "key"},
		{stmt: "ALTER TABLE orders DROP KEY IF EXISTS PRIMARY", want: "key"},
		{stmt: "ALTER TABLE orders DROP INDEX primary_lookup", want: "id bigint(20) not null key1, note varchar(20), qty int(11)"},

		// The server finds each clause's column before the statement:
		// a swap of two names, a clause on a name an earlier one made,
		// a new name another column has are not applied in turn.
		{stmt: "ALTER TABLE orders CHANGE note qty VARCHAR(20), CHANGE qty note INT", want: "refused"},
		{stmt: "ALTER TABLE orders RENAME COLUMN note TO memo, DROP COLUMN memo", want: "refused"},
		{stmt: "ALTER TABLE orders ADD COLUMN x INT, MODIFY x BIGINT", want: "refused"},
		{stmt: "ALTER TABLE orders CHANGE note qty VARCHAR(20)", want: "refused"},
		{stmt: "ALTER TABLE orders DROP COLUMN note, ADD COLUMN note INT", want: "id bigint(20) not null key1, qty int(11), note int(11)"},
		{stmt: "ALTER TABLE orders ADD COLUMN a VARCHAR(5) ASCII, ADD COLUMN u CHAR(2) UNICODE, ADD COLUMN c VARCHAR(3) BINARY", want: "id bigint(20) not null key1, note varchar(20), qty int(11), a varchar(5) latin1, u char(2) ucs2, c varchar(3)", def: utf8},
		{stmt: "ALTER TABLE orders ADD COLUMN b VARCHAR(5) BYTE", want: "refused"},
		{stmt: "ALTER TABLE orders ADD COLUMN b VARCHAR(5) CHARACTER SET binary", want: "refused"},
		// A collation named without its set (MariaDB 10.10+): the catalog
		// says the set, not "uca1400".
		{stmt: "ALTER TABLE orders ADD COLUMN s VARCHAR(3) CHARACTER SET ucs2 COLLATE uca1400_ai_ci", want: "refused"},
		{stmt: "ALTER TABLE orders ADD COLUMN s VARCHAR(3) COLLATE ucs2_uca1400_ai_ci", want: "id bigint(20) not null key1, note varchar(20), qty int(11), s varchar(3) ucs2"},
		{stmt: "ALTER TABLE orders ADD COLUMN a INT, ADD COLUMN b INT AFTER a", want: "id bigint(20) not null key1, note varchar(20), qty int(11), a int(11), b int(11)"},
	} {
		a, ok := parseAlter(c.stmt, "shop")
		got := "refused"
		switch {
		case !ok:
		case a.table != "shop.orders":
			got = "table " + a.table
		case a.key:
			got = "key"
		case a.renamed:
			got = "renamed"
		default:
			def := c.def
			if def == nil {
				def = func() (string, bool) {
					t.Fatalf("%s: the table's default character set asked", c.stmt)
					return "", false
				}
			}
			if d, cs, ok := a.apply(shopOrders(), nil, "mariadb", def); ok {
				got = describe(d, cs)
			}
		}
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.stmt, got, c.want)
		}
	}
}

// A statement that sets the table's default character set says which,
// wherever the clause stands and whatever options surround it; CONVERT
// TO CHARACTER SET is not followed but its set is known; a set named
// DEFAULT (the database's) is not known here.
func TestAnAlterTableSaysTheTablesNewDefaultCharacterSet(t *testing.T) {
	for _, c := range []struct{ stmt, want string }{
		{"ALTER TABLE orders DEFAULT CHARSET=latin1", "latin1"},
		{"ALTER TABLE orders ENGINE=InnoDB DEFAULT CHARACTER SET = latin1 COLLATE latin1_bin", "latin1"},
		{"ALTER TABLE orders COLLATE = utf8mb4_bin", "utf8mb4"},
		{"ALTER TABLE orders ADD c VARCHAR(3), CHARSET utf8mb3, ALGORITHM=COPY", "utf8mb4"},
		{"ALTER TABLE orders COMMENT 'charset latin1', ADD c VARCHAR(3) CHARACTER SET latin1", ""},
		{"ALTER TABLE orders PARTITION BY HASH(id) PARTITIONS 4", ""},
		{"ALTER TABLE orders CONVERT TO CHARACTER SET latin1 COLLATE latin1_bin", "latin1 converts, refused"},
		{"ALTER TABLE orders CONVERT TO CHARSET DEFAULT", "refused"},
		{"ALTER TABLE orders CHARACTER SET DEFAULT", "refused"},
		{"ALTER TABLE orders DEFAULT COLLATE = uca1400_ai_ci", "refused"},
		{"ALTER TABLE orders COLLATE utf8mb4_uca1400_as_ci", "utf8mb4"},
	} {
		a, ok := parseAlter(c.stmt, "shop")
		got := a.defaultCharset
		if a.converts {
			got += " converts"
		}
		if !ok {
			got = strings.TrimPrefix(got+", refused", ", ")
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.stmt, got, c.want)
		}
	}
}

// A column a statement adds without a set takes the table's default as
// the statement leaves it (even from a clause after it), else as the
// history holds it; the catalog, which may show a later default, is not
// asked. The default the statement sets is kept, with no column changed
// too.
func TestTheHistoryKeepsTheTablesDefaultCharacterSet(t *testing.T) {
	noCatalog := func() (*sql.DB, error) { return nil, errors.New("the catalog is not to be asked") }
	st := tableState{Def: shopOrders(), DefaultCharset: "utf8mb4"}
	follow := func(st tableState, stmt string) tableState {
		t.Helper()
		a, ok := parseAlter(stmt, "shop")
		if !ok {
			t.Fatalf("%s: not read", stmt)
		}
		next, _, why, followed := followAlter(context.Background(), noCatalog, "shop.orders", st, a, stmt, "mariadb")
		if why != "" || !followed {
			t.Fatalf("%s: not followed (%s)", stmt, why)
		}
		return next
	}
	next := follow(st, "ALTER TABLE orders ADD a VARCHAR(3), DEFAULT CHARSET=latin1")
	if got := describe(next.Def, next.Charsets) + " / " + next.DefaultCharset; got != "id bigint(20) not null key1, note varchar(20), qty int(11), a varchar(3) latin1 / latin1" {
		t.Fatalf("got %s", got)
	}
	next = follow(next, "ALTER TABLE orders ENGINE=InnoDB, CHARSET utf8mb4")
	if next.DefaultCharset != "utf8mb4" || next.Version != 1 {
		t.Fatalf("after a default alone: %+v", next)
	}
	next = follow(next, "ALTER TABLE orders ADD b TEXT")
	if got := describe(next.Def, next.Charsets); got != "id bigint(20) not null key1, note varchar(20), qty int(11), a varchar(3) latin1, b text" {
		t.Fatalf("got %s", got)
	}
}

// The catalog's definition is used when it is the one a statement gave,
// integer display widths aside.
func TestTheCatalogsTypesAreUsedWhenTheyAgree(t *testing.T) {
	a, _ := parseAlter("ALTER TABLE orders ADD COLUMN extra INT UNSIGNED, MODIFY qty BIGINT", "shop")
	def, cs, ok := a.apply(shopOrders(), nil, "mariadb", nil)
	if !ok {
		t.Fatal("not applied")
	}
	cat := shopOrders()
	cat.Columns[2].Type = "bigint(20)"
	cat.Columns = append(cat.Columns, source.ColumnDef{Name: "extra", Type: "int(10) unsigned", Nullable: true})
	if !sameShape(cat, nil, def, cs) {
		t.Fatalf("%s and %s differ", describe(cat, nil), describe(def, cs))
	}
	cat.Columns[3].Name = "other"
	if sameShape(cat, nil, def, cs) {
		t.Fatal("a column of another name is the same shape")
	}
}

// FuzzParseAlter: any statement is read or refused, never a panic; what
// is read applies or is refused.
func FuzzParseAlter(f *testing.F) {
	for _, s := range []string{
		"ALTER TABLE orders ADD COLUMN extra INT", "ALTER TABLE t ADD (a INT, b ENUM('x','y'))",
		"ALTER TABLE `a``b`.c CHANGE x y VARCHAR(3) CHARSET latin1 AFTER z", "ALTER TABLE t DROP PRIMARY KEY",
		"ALTER TABLE t MODIFY c DECIMAL(65,30) DEFAULT (1+2) NOT NULL FIRST", "ALTER TABLE t RENAME COLUMN a TO b",
		"ALTER TABLE t ADD c INT /* x */, ALGORITHM=COPY;", "alter table t add column 'x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stmt string) {
		a, ok := parseAlter(stmt, "shop")
		if !ok {
			return
		}
		_, _, _ = a.apply(shopOrders(), map[int]string{1: "latin1"}, "mysql", func() (string, bool) { return "latin1", true })
	})
}

// RENAME TABLE is read exactly: every pair in order, in the statement's
// default database unless named; anything else is not read.
func TestRenameTableIsReadExactly(t *testing.T) {
	for stmt, want := range map[string]string{
		"RENAME TABLE items TO items_v2":                             "shop.items>shop.items_v2",
		"rename table `shop`.a to b, other.c TO `other`.`d` /* x */": "shop.a>shop.b other.c>other.d",
		"RENAME TABLE IF EXISTS a TO b WAIT 3":                       "",
		"RENAME TABLE IF EXISTS a TO b":                              "shop.a>shop.b",
		"RENAME TABLE a b":                                           "",
		"RENAME USER a TO b":                                         "",
		"ALTER TABLE a RENAME TO b":                                  "",
		// gh-ost's swap, as it writes it; a comment's words are not read.
		"rename /* gh-ost */ table `shop`.`orders` to `shop`.`_orders_del`, `shop`.`_orders_gho` to `shop`.`orders`": "shop.orders>shop._orders_del shop._orders_gho>shop.orders",
		"RENAME -- why\n TABLE a TO b # done": "shop.a>shop.b",
		"RENAME TABLE `a/*b` TO `c*/d`":       `shop."a/*b">shop."c*/d"`,
	} {
		pairs, ok := renamedTables(withoutComments(stmt), "shop")
		var got []string
		for _, p := range pairs {
			got = append(got, p[0]+">"+p[1])
		}
		if g := strings.Join(got, " "); g != want || ok != (want != "") {
			t.Errorf("%s: %q (%v), want %q", stmt, g, ok, want)
		}
	}
}

// CREATE TABLE is read for the one table it creates, never for the
// tables it only reads (LIKE, a SELECT); anything else is not read.
func TestCreateTableIsReadForTheTableItCreates(t *testing.T) {
	for stmt, want := range map[string]string{
		"CREATE TABLE extra (id INT PRIMARY KEY, v INT)":                      "shop.extra",
		"create table `other`.`t`(id int)":                                    "other.t",
		"CREATE TABLE IF NOT EXISTS orders_copy LIKE orders":                  "shop.orders_copy",
		"CREATE TABLE s AS SELECT id FROM orders":                             "shop.s",
		"CREATE OR REPLACE TABLE orders (id INT PRIMARY KEY)":                 "shop.orders replaces",
		"CREATE TEMPORARY TABLE orders (id INT)":                              "shop.orders temporary",
		"CREATE OR REPLACE TEMPORARY TABLE t LIKE orders":                     "shop.t replaces temporary",
		"CREATE INDEX i ON orders (v)":                                        "",
		"CREATE VIEW v AS SELECT * FROM orders":                               "",
		"CREATE TABLE":                                                        "",
		"CREATE TABLE `a`b` (id INT)":                                         "",
		"ALTER TABLE orders ADD COLUMN c INT":                                 "",
		"create /* gh-ost */ table `shop`.`_orders_gho` like `shop`.`orders`": "shop._orders_gho",
	} {
		name, replaces, temporary, ok := createdTable(withoutComments(stmt), "shop")
		got := name
		if replaces {
			got += " replaces"
		}
		if temporary {
			got += " temporary"
		}
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q (%v), want %q", stmt, got, ok, want)
		}
	}
}

// Views, triggers, routines, events and grants change no table's
// columns, however MariaDB writes their definers; tables, indexes and
// databases are not among them.
func TestStatementsThatChangeNoTable(t *testing.T) {
	for stmt, want := range map[string]bool{
		"CREATE VIEW v AS SELECT * FROM orders":                                                              true,
		"CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select 1":    true,
		"CREATE OR REPLACE VIEW v AS SELECT id FROM orders":                                                  true,
		"CREATE DEFINER=`root`@`localhost` TRIGGER t BEFORE INSERT ON orders FOR EACH ROW SET NEW.v = NEW.v": true,
		"create definer = `root`@`%` trigger t after update on orders for each row begin end":                true,
		"DROP TRIGGER IF EXISTS t":              true,
		"DROP VIEW orders_v":                    true,
		"ALTER VIEW v AS SELECT id FROM orders": true,
		"CREATE FUNCTION f() RETURNS INT RETURN (SELECT COUNT(*) FROM orders)": true,
		"GRANT SELECT ON shop.orders TO cdc":                                   true,
		"CREATE TABLE orders_v (id INT)":                                       false,
		"CREATE INDEX i ON orders (v)":                                         true,
		"DROP INDEX `PRIMARY` ON orders":                                       false,
		"drop index primary on orders":                                         false,
		"ALTER TABLE orders ADD COLUMN c INT":                                  false,
		"DROP TABLE orders":                                                    false,
		"CREATE DATABASE view":                                                 true,
		"RENAME TABLE orders TO view":                                          false,
		"OPTIMIZE TABLE orders":                                                true,
		"ANALYZE TABLE orders":                                                 true,
		"FLUSH TABLES orders":                                                  true,
		"RENAME USER orders TO x":                                              true,
		"DROP TEMPORARY TABLE orders":                                          true,
		"ALTER ONLINE IGNORE TABLE orders ADD c INT":                           false,
		"CREATE UNIQUE INDEX i ON orders (v)":                                  true,
		"DROP INDEX i ON orders":                                               true,
		"TRUNCATE orders":                                                      false,
		"DROP DATABASE shop":                                                   false,
		"/*!50001 CREATE VIEW v AS SELECT * FROM orders */":                    false,
		// A comment after the verb was taken for the object's kind: a
		// table dropped, renamed or altered so was passed over.
		"alter /* gh-ost */ table `shop`.`_orders_gho` add column c int": false,
		"DROP /* x */ TABLE orders":                                      false,
		"rename /* gh-ost */ table a to b, c to a":                       false,
		"CREATE /* x */ VIEW v AS SELECT 1":                              true,
	} {
		if got := changesNoTable(withoutComments(stmt)); got != want {
			t.Errorf("%s: %v, want %v", stmt, got, want)
		}
	}
	for stmt, want := range map[string]string{
		"DROP DATABASE shop":                      "shop",
		"drop schema if exists `shop` /* by x */": "shop",
		"DROP DATABASE shop extra":                "",
		"DROP TABLE shop":                         "",
	} {
		if got, ok := droppedDatabase(withoutComments(stmt)); got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", stmt, got, ok, want)
		}
	}
}

// An update logged as a partial JSON change (MySQL's
// binlog_row_value_options=PARTIAL_JSON, set after the changefeed's
// preflight refused it) is not decoded into a row with the JSON value
// missing: the table is held with why and what to change.
func TestAPartialJSONUpdateSaysWhatToChange(t *testing.T) {
	st := tableState{Def: shopOrders()}
	cols := make([]column, len(st.Def.Columns))
	for i, c := range st.Def.Columns {
		cols[i] = parseColumn(c.Type)
	}
	e := &replication.RowsEvent{ColumnCount: 3, Rows: [][]any{{int64(1), "a", int32(2)}, {int64(1), "b", int32(2)}}}
	_, err := rowEvents(nil, e, replication.PARTIAL_UPDATE_ROWS_EVENT, "shop.orders", st, cols, keyTypes(st.Def))
	if err == nil || !strings.Contains(err.Error(), "SET GLOBAL binlog_row_value_options=''") {
		t.Fatalf("a partial JSON update: %v", err)
	}
	// The same rows as a plain update are decoded.
	evs, err := rowEvents(nil, e, replication.UPDATE_ROWS_EVENTv2, "shop.orders", st, cols, keyTypes(st.Def))
	if err != nil || len(evs) != 1 || evs[0].New[1].Text != "b" {
		t.Fatalf("a plain update: %v %+v", err, evs)
	}
}

// XA statements are told apart from schema changes by their verb, with
// the transaction's id as the server writes it, ONE PHASE aside.
func TestXAStatementsAreRead(t *testing.T) {
	for q, want := range map[string]string{
		"XA START X'7831',X'',1":            "START X'7831',X'',1",
		"xa begin X'78'":                    "START X'78'",
		"XA END X'7831',X'',1":              "END X'7831',X'',1",
		"XA COMMIT X'7831',X'',1":           "COMMIT X'7831',X'',1",
		"XA COMMIT X'7831',X'',1 ONE PHASE": "COMMIT X'7831',X'',1",
		"XA ROLLBACK X'7832',X'',1":         "ROLLBACK X'7832',X'',1",
		"XA RECOVER":                        " ",
		"ALTER TABLE xa ADD COLUMN x INT":   " ",
		"XAVIER":                            " ",
	} {
		verb, xid := xaStatement(q)
		if got := verb + " " + xid; got != want {
			t.Errorf("%s: %q, want %q", q, got, want)
		}
	}
}

// An online schema change's swap is told from other renames by its
// names: the table to _t_del (gh-ost) or _t_old (pt-osc), its own
// shadow, _t_gho or _t_new, to the table, in one statement.
func TestAnOnlineSchemaChangesSwapIsToldFromOtherRenames(t *testing.T) {
	tables := map[string]tableState{"shop.orders": {}, "shop.items": {}, "shop.gone": {Dropped: true}}
	for _, c := range []struct {
		pairs [][2]string
		want  string
	}{
		{[][2]string{{"shop.orders", "shop._orders_del"}, {"shop._orders_gho", "shop.orders"}}, "shop.orders from shop._orders_gho"},
		{[][2]string{{"shop.orders", "shop._orders_old"}, {"shop._orders_new", "shop.orders"}}, "shop.orders from shop._orders_new"},
		{[][2]string{{"shop._orders_gho", "shop.orders"}, {"shop.orders", "shop._orders_del"}}, "shop.orders from shop._orders_gho"},
		{[][2]string{{"shop.orders", "shop.orders_v2"}}, ""},
		{[][2]string{{"shop.orders", "shop._orders_del"}, {"shop._items_gho", "shop.orders"}}, ""},
		{[][2]string{{"shop.orders", "shop._orders_del"}, {"other._orders_gho", "shop.orders"}}, ""},
		{[][2]string{{"shop.orders", "shop.backup"}, {"shop._orders_gho", "shop.orders"}}, ""},
		{[][2]string{{"shop.gone", "shop._gone_del"}, {"shop._gone_gho", "shop.gone"}}, ""},
	} {
		got := ""
		if table, shadow, ok := cutOver(c.pairs, tables); ok {
			got = table + " from " + shadow
		}
		if got != c.want {
			t.Errorf("%v: %q, want %q", c.pairs, got, c.want)
		}
	}
	if got := asTables("ALTER TABLE `shop`.`_orders_gho` ADD x INT", "shop._orders_gho", "shop.orders"); got != "ALTER TABLE `shop`.`orders` ADD x INT" {
		t.Fatalf("as the table's: %s", got)
	}
	if got := asTables("alter table _orders_new add x int", "shop._orders_new", "shop.orders"); got != "alter table orders add x int" {
		t.Fatalf("as the table's: %s", got)
	}
}

// An integer's (and YEAR's) type is written as the flavor's catalog
// writes it. MariaDB's forms are checked against a server by
// TestTheHistoryWritesTypesAsTheCatalogDoes; MySQL 8's (8.0.19 on: no
// display width but TINYINT(1)'s and a ZEROFILL column's) are from its
// manual, with no MySQL 8 server here to ask.
func TestIntegerTypesAreWrittenAsTheFlavorsCatalogDoes(t *testing.T) {
	for _, c := range []struct{ typ, mariadb, mysql string }{
		{"int", "int(11)", "int"},
		{"int(11)", "int(11)", "int"},
		{"int(5) unsigned", "int(5) unsigned", "int unsigned"},
		{"tinyint(1)", "tinyint(1)", "tinyint(1)"},
		{"tinyint unsigned", "tinyint(3) unsigned", "tinyint unsigned"},
		{"bigint unsigned", "bigint(20) unsigned", "bigint unsigned"},
		{"smallint unsigned zerofill", "smallint(5) unsigned zerofill", "smallint(5) unsigned zerofill"},
		{"mediumint(3) unsigned zerofill", "mediumint(3) unsigned zerofill", "mediumint(3) unsigned zerofill"},
		{"year", "year(4)", "year"},
		{"decimal(10,0)", "decimal(10,0)", "decimal(10,0)"},
		{"varchar(20)", "varchar(20)", "varchar(20)"},
	} {
		if got := asCatalog(c.typ, "mariadb"); got != c.mariadb {
			t.Errorf("%s on MariaDB: %s, want %s", c.typ, got, c.mariadb)
		}
		if got := asCatalog(c.typ, "mysql"); got != c.mysql {
			t.Errorf("%s on MySQL: %s, want %s", c.typ, got, c.mysql)
		}
	}
}

// DROP TABLE and TRUNCATE are read past comments anywhere: MariaDB's
// after the names, a tool's after the verb or the name.
func TestDropAndTruncateAreReadPastComments(t *testing.T) {
	for stmt, want := range map[string]string{
		"DROP TABLE `orders` /* generated by server */": "shop.orders",
		"DROP /* x */ TABLE IF EXISTS a, `b`":           "shop.a shop.b",
		"drop table `order items`, b":                   `shop."order items" shop.b`,
		"DROP TABLE a /* unterminated":                  "",
	} {
		names, ok := droppedTables(withoutComments(stmt), "shop")
		if g := strings.Join(names, " "); g != want || ok != (want != "") {
			t.Errorf("%s: %q (%v), want %q", stmt, g, ok, want)
		}
	}
	for stmt, want := range map[string]string{
		"TRUNCATE TABLE orders /* app */": "shop.orders",
		"truncate /* x */ orders":         "shop.orders",
	} {
		if got, ok := truncated(withoutComments(stmt), "shop"); got != want || !ok {
			t.Errorf("%s: %q (%v), want %q", stmt, got, ok, want)
		}
	}
	if got := withoutComments("INSERT INTO t VALUES ('/* not a comment */', \"-- nor\", `#this`) -- but this is"); got != "INSERT INTO t VALUES ('/* not a comment */', \"-- nor\", `#this`) " {
		t.Errorf("comments inside quotes: %q", got)
	}
}

// An ALTER TABLE the history cannot apply is followed by the next row's
// table map and the catalog, unless it renames the table itself: a
// column or index rename is not a table's.
func TestOnlyATableRenameIsNotFollowable(t *testing.T) {
	for stmt, want := range map[string]bool{
		"ALTER TABLE orders RENAME COLUMN a TO b":              true,
		"alter table orders rename index i to j, add c int":    true,
		"ALTER TABLE orders RENAME KEY i TO j":                 true,
		"ALTER TABLE orders RENAME TO orders_v2":               false,
		"ALTER TABLE orders RENAME AS orders_v2":               false,
		"ALTER TABLE orders RENAME orders_v2":                  false,
		"ALTER TABLE orders RENAME COLUMN a TO b, RENAME TO x": false,
		"ALTER TABLE orders ADD c INT,RENAME TO x":             false,
		"CREATE INDEX i ON orders (a)":                         true,
		"DROP TABLE orders":                                    false,
	} {
		if got := followable(stmt); got != want {
			t.Errorf("%s: %v, want %v", stmt, got, want)
		}
	}
}

// A catalog that cannot be read now (a failover, too many connections)
// is an error the reader starts again for, not a reason to hold the
// table, whose remedy would copy it again.
func TestACatalogThatCannotBeReadNowHoldsNothing(t *testing.T) {
	db, err := sql.Open("mysql", "cdc@tcp(127.0.0.1:1)/shop")
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, ddl, why, err := followSchema(context.Background(), db, "shop.orders", tableState{}, nil, "")
	if err == nil || why != "" || ddl != nil {
		t.Fatalf("a closed catalog: err %v, hold %q", err, why)
	}
}

// An ALTER TABLE that renames the table says its new name where it reads
// it exactly: the changefeed follows the table there (stream.go).
func TestAnAlterThatRenamesTheTableNamesItsNewName(t *testing.T) {
	for stmt, want := range map[string]string{
		"ALTER TABLE orders RENAME TO orders_v2":        "shop.orders_v2",
		"ALTER TABLE orders RENAME AS archive.orders":   "archive.orders",
		"ALTER TABLE orders RENAME orders_v2":           "shop.orders_v2",
		"ALTER TABLE orders ADD c INT, RENAME TO x;":    "shop.x",
		"ALTER TABLE orders RENAME TO `Orders 2`":       `shop."Orders 2"`,
		"ALTER TABLE orders RENAME COLUMN note TO memo": "",
		"ALTER TABLE orders RENAME INDEX a TO b":        "",
	} {
		a, ok := parseAlter(stmt, "shop")
		if !ok && want != "" || a.renamedTo != want {
			t.Errorf("%s: renamed to %q (read: %v), want %q", stmt, a.renamedTo, ok, want)
		}
	}
}
