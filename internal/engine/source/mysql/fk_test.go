package mysql_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// The server writes no row events for the rows a foreign key's cascade
// changes (shown here: a parent's delete arrives, its children's do
// not), so the sink would keep them: the source's status warns of each
// replicated table whose key cascades, naming the key and what to do,
// and of no other.
func TestCascadingForeignKeysAreWarnedOf(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "parent,child,careful", nil, "CREATE TABLE parent (id INT PRIMARY KEY)",
		"CREATE TABLE child (id INT PRIMARY KEY, pid INT, CONSTRAINT child_parent FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE CASCADE)",
		"CREATE TABLE careful (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE RESTRICT)",
		"CREATE TABLE unreplicated (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES parent (id) ON UPDATE SET NULL)",
		"INSERT INTO parent VALUES (1), (2)", "INSERT INTO child VALUES (10, 1), (20, 2)")
	dsn, first, log := up.dsn, up.first, up.log
	exec(t, dsn, "DELETE FROM parent WHERE id = 1")
	waitResolved(t, log)
	evs, _, _ := log.state()
	var got []string
	for _, e := range evs {
		got = append(got, e.Table+" "+e.Op.String())
	}
	if strings.Join(got, ", ") != "shop.parent DELETE" {
		t.Fatalf("the stream after a parent's delete: %v (the server's cascade to child writes no row event)", got)
	}

	// Also to a user with only SELECT on the tables (MariaDB shows such a
	// user no REFERENTIAL_CONSTRAINTS: the keys are read from SHOW CREATE
	// TABLE, root's never), the same warning; also where the server's
	// sql_mode quotes names in double quotes and leaves them bare.
	exec(t, dsn, "CREATE USER reader@'%' IDENTIFIED BY 'pw'", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO reader@'%'", "GRANT SELECT ON shop.* TO reader@'%'")
	status := mysqltest.Open(t, dsn)
	showCreates := func() int {
		var name string
		var n int
		if err := status.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_show_create_table'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct{ user, setup string }{
		{"root", ""}, {"reader:pw", ""}, {"reader:pw", "SET GLOBAL sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES'), GLOBAL sql_quote_show_create = 0"},
	} {
		if c.setup != "" {
			exec(t, dsn, c.setup)
		}
		before := showCreates()
		st, err := mysql.Inspect(context.Background(), uri(up.srv, c.user, "parent,child,careful"), first)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Warnings) != 1 || !strings.HasPrefix(st.Warnings[0], "shop.child: its foreign key child_parent to shop.parent is ON DELETE CASCADE") ||
			!strings.Contains(st.Warnings[0], "make the key RESTRICT") {
			t.Fatalf("%s %s: warnings: %q", c.user, c.setup, st.Warnings)
		}
		if n := showCreates() - before; c.user == "root" && n != 0 {
			t.Errorf("root's check read SHOW CREATE TABLE %d times; the catalog shows root the keys' rules", n)
		}
	}
}
