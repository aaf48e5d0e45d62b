package mysql_test

import (
	"context"
	"fmt"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
)

// Rows that were in a table before an ALTER TABLE … ADD COLUMN … DEFAULT
// have the default upstream, and in the sink no such column: the server
// logs no row events for them. Verify gives them the value the statement
// gave them, as the server writes it (1.5 in a DECIMAL(10,2) is 1.50),
// and finds the tables equal. Where it cannot know that value (a
// default computed at the statement's moment, or one changed since),
// it does not guess: those rows are reported different, as before.
func TestVerifyGivesOlderRowsTheDefaultOfAnAddedColumn(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db,
		`CREATE TABLE olines (id INT PRIMARY KEY, qty INT NOT NULL)`, `INSERT INTO olines VALUES (1, 1), (2, 2), (3, 3)`,
		`CREATE TABLE stamps (id INT PRIMARY KEY)`, `INSERT INTO stamps VALUES (1), (2)`,
		`CREATE TABLE moved (id INT PRIMARY KEY)`, `INSERT INTO moved VALUES (1), (2)`)
	tc, _ := followShop(t, srv, "olines,stamps,moved", 1)
	mysqltest.Exec(t, db,
		"ALTER TABLE olines ADD COLUMN price DECIMAL(10,2) NOT NULL DEFAULT 1.5, ADD (tag VARCHAR(10) DEFAULT 'new', `flag` TINYINT DEFAULT TRUE), ADD COLUMN note TEXT",
		`INSERT INTO olines (id, qty) VALUES (4, 4)`, `UPDATE olines SET qty = 20 WHERE id = 2`,
		// Computed at the statement's moment: unknowable afterwards.
		`ALTER TABLE stamps ADD COLUMN at DATETIME DEFAULT CURRENT_TIMESTAMP`,
		// Changed since: today's default is not what the rows got.
		`ALTER TABLE moved ADD COLUMN v INT DEFAULT 7`, `ALTER TABLE moved ALTER COLUMN v SET DEFAULT 8`)
	up, _, err := mysql.NewTableReader(tc.Changefeed("my").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("my", up, []string{"shop.olines"}, time.Now())
	if !rep.OK || rep.Keys != 4 {
		t.Fatalf("after ADD COLUMN … DEFAULT: %+v", rep)
	}
	rep = tc.VerifyDatabase("my", up, []string{"shop.stamps", "shop.moved"}, time.Now())
	if rep.OK || rep.Corrupt != 4 {
		t.Fatalf("rows whose added column's value cannot be known: %+v, want the four reported different", rep)
	}

	// What verify was told, statement by statement.
	fills, err := up.Backfills(context.Background(), "shop.olines", []string{
		"ALTER TABLE olines ADD COLUMN price DECIMAL(10,2) NOT NULL DEFAULT 1.5, ADD (tag VARCHAR(10) DEFAULT 'new', `flag` TINYINT DEFAULT TRUE), ADD COLUMN note TEXT",
		"ALTER TABLE olines ADD INDEX (qty)",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(fills); got != "[map[flag:1 price:1.50 tag:new] map[]]" {
		t.Fatalf("backfills: %s", got)
	}
	for _, later := range []string{"ALTER TABLE olines MODIFY price DECIMAL(12,2) NOT NULL DEFAULT 2", "ALTER TABLE olines ALTER price DROP DEFAULT",
		"ALTER TABLE olines RENAME COLUMN price TO cost", "ALTER TABLE olines DROP price", "/*!100000 ALTER TABLE olines ALTER COLUMN price SET DEFAULT 3 */"} {
		fills, err := up.Backfills(context.Background(), "shop.olines", []string{"ALTER TABLE olines ADD COLUMN price DECIMAL(10,2) NOT NULL DEFAULT 1.5", later})
		if err != nil {
			t.Fatal(err)
		}
		if len(fills[0]) != 0 {
			t.Errorf("after %q: %v, want no value for price", later, fills)
		}
	}
	if !strings.Contains(fmt.Sprint(rep.Examples), "differs in column") {
		t.Errorf("examples: %v", rep.Examples)
	}
}
