package mysql_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A transaction larger than what the reader holds in memory goes to the
// log in parts as it is read, every row at the one position its commit
// resolves. A schema change met in its middle — a table converted to
// another character set before it, whose first row in it comes after
// the first part — takes a position of its own below the rows, and that
// table's rows are of its version and decoded with it.
func TestALargeTransactionGoesToTheLogInParts(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "big,conv", nil, "CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE conv (id INT PRIMARY KEY, v VARCHAR(20)) DEFAULT CHARSET=latin1")
	dsn, log := up.dsn, up.log
	exec(t, dsn, "INSERT INTO big VALUES (-1, 'before')", "ALTER TABLE conv CONVERT TO CHARACTER SET utf8mb4")

	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	insert := func(from, to int) {
		vals := make([]string, 0, to-from)
		for id := from; id < to; id++ {
			vals = append(vals, fmt.Sprintf("(%d, 'row %d')", id, id))
		}
		if _, err := tx.Exec("INSERT INTO big VALUES " + strings.Join(vals, ", ")); err != nil {
			t.Fatal(err)
		}
	}
	insert(0, 5000)
	if _, err := tx.Exec("INSERT INTO conv VALUES (1, 'naïve ✓')"); err != nil {
		t.Fatal(err)
	}
	insert(5000, 10000)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	exec(t, dsn, "INSERT INTO big VALUES (10000, 'after')")
	waitResolved(t, log)

	evs, _, held := log.state()
	log.mu.Lock()
	parts := append([]int(nil), log.parts...)
	log.mu.Unlock()
	if len(held) != 0 {
		t.Fatalf("held: %v", held)
	}
	inParts := 0
	for _, n := range parts {
		inParts += n
		if n > 5000 {
			t.Fatalf("a part of %d rows (parts %v): the transaction was held in memory", n, parts)
		}
	}
	if len(parts) < 2 || inParts < 8192 {
		t.Fatalf("parts %v: the transaction of 10,001 rows did not go to the log in parts", parts)
	}
	// The log in order: the row before, the schema change, the
	// transaction's rows, the row after.
	var ddl *source.Event
	var rowsAt model.Ts
	rows, convRows := 0, 0
	for i := range evs {
		e := &evs[i]
		switch {
		case e.Kind == source.KindDDL && e.Table == "shop.conv":
			ddl = e
		case e.Kind == source.KindDML && e.Table == "shop.conv":
			convRows++
			if ddl == nil || e.TableVersion != ddl.CommitTs || e.SchemaVersion != ddl.SchemaVersion || e.New[1].Text != "naïve ✓" {
				t.Fatalf("conv's row %+v, after the schema change %+v: not of its version, or decoded otherwise", e.New, ddl)
			}
			fallthrough
		case e.Kind == source.KindDML && e.New[0].Text != "-1" && e.New[0].Text != "10000":
			rows++
			if rowsAt == 0 {
				rowsAt = e.CommitTs
			}
			if e.CommitTs != rowsAt {
				t.Fatalf("row %s of the transaction at %s, its first at %s", e.New[0].Text, e.CommitTs, rowsAt)
			}
		}
	}
	// The change met in the transaction, not at the ALTER's own
	// position: conv's first, at the transaction's base (slots.go); the
	// rows 1,024 (its slots for changes) past it.
	if rows != 10001 || convRows != 1 || ddl == nil || rowsAt-ddl.CommitTs != 1024 {
		t.Fatalf("%d rows of the transaction at %s, %d of conv, its schema change %+v", rows, rowsAt, convRows, ddl)
	}
	if before, after := evs[0], evs[len(evs)-1]; before.New[0].Text != "-1" || before.CommitTs >= ddl.CommitTs || after.New[0].Text != "10000" || after.CommitTs <= rowsAt {
		t.Fatalf("the rows around it: %s at %s, %s at %s; the schema change at %s, the rows at %s", before.New[0].Text, before.CommitTs, after.New[0].Text, after.CommitTs, ddl.CommitTs, rowsAt)
	}
	t.Logf("parts %v; the schema change at %s, the rows at %s", parts, ddl.CommitTs, rowsAt)
}
