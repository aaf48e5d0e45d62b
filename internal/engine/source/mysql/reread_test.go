package mysql_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A reader started again from a resume point after the changefeed's
// tables changed (a held table's remedy: a table dropped and created
// again is copied again from the changefeed's checkpoint) finds other
// schema changes than the first read did: the dropped table's DROP is
// before it joined again, so not its. The rows of every other table
// keep the positions the first read gave them. Before, a transaction's
// rows came just past its last schema change, and every transaction
// after the DROP moved one position down until the next tick: a
// partition whose checkpoint was ahead of the changefeed's passed over
// the one that moved onto it (an update of a kept table lost, seen once
// in TestATableDroppedUpstreamIsEndedByTheChangefeedItself).
func TestRowsKeepTheirPositionsWhenTheTablesChangedBeforeARead(t *testing.T) {
	t.Parallel()
	tables := "keep,gone,back"
	u := followFrom(t, tables, nil,
		`CREATE TABLE keep (id INT PRIMARY KEY, n INT)`, `CREATE TABLE gone (id INT PRIMARY KEY, n INT)`,
		`CREATE TABLE back (id INT PRIMARY KEY, n INT)`, `INSERT INTO keep VALUES (1, 0), (2, 0), (3, 0)`,
		`INSERT INTO gone VALUES (1, 0)`, `INSERT INTO back VALUES (1, 0)`)
	// The DROP and the updates after it quickly, between two ticks (the
	// first is written as the reader starts; one every 500 ms after): a
	// tick's time would bring both reads' positions together again.
	time.Sleep(150 * time.Millisecond)
	stmts := []string{`UPDATE keep SET n = n + 1 WHERE id = 1`, `DROP TABLE gone, back`, `CREATE TABLE back (id INT PRIMARY KEY, n INT)`}
	for i := 0; i < 30; i++ {
		stmts = append(stmts, fmt.Sprintf(`UPDATE keep SET n = n + 1 WHERE id = %d`, 1+i%3))
	}
	exec(t, u.dsn, stmts...)
	waitResolved(t, u.log)
	first, _, _ := u.log.state()
	// The changefeed's checkpoint: just past the DROP, at the first
	// transaction after it.
	var at model.Ts
	for _, e := range first {
		if e.Kind == source.KindDDL && e.Table == "shop.back" {
			at = e.CommitTs
		} else if at != 0 && e.Table == "shop.keep" {
			at = e.CommitTs
			break
		}
	}
	if at == 0 {
		t.Fatalf("no row of shop.keep after the DROP of shop.back in the first read:\n%s", u.log.lines(t, true))
	}
	ch, err := mysql.Retable(context.Background(), uri(u.srv, "root", tables), u.first, []string{"shop.keep", "shop.gone", "shop.back"}, at, true, "shop.back")
	if err != nil {
		t.Fatal(err)
	}
	// (Another server id: the first reader goes on until the test ends.)
	again := pull(t, mysql.NewPuller(parse(t, uri(u.srv, "root", tables)+"&server-id=4242"), "cf", "mariadb", nil), ch.Position)
	waitResolved(t, again)
	second, _, _ := again.state()
	after := func(evs []source.Event) []string {
		var out []string
		for _, e := range evs {
			if e.Table == "shop.keep" && e.Kind != source.KindDDL && e.CommitTs > at {
				out = append(out, fmt.Sprintf("%s %s=%s", e.CommitTs, e.New[0].Text, e.New[1].Text))
			}
		}
		return out
	}
	want, got := after(first), after(second)
	if len(want) < 20 {
		t.Fatalf("only %d rows of shop.keep after %s in the first read", len(want), at)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the rows of shop.keep after the checkpoint %s moved in the read after the tables changed:\nfirst read:\n%v\nread again:\n%v", at, want, got)
	}
}

// A schema change keeps its position too when a read again finds fewer
// before it: a partition waits at a table's change one position below
// it and reads on past it, so a change placed lower is never written,
// one placed higher is written twice. Here the changefeed's tables
// changed before a DROP TABLE of two of them (the first removed at a
// checkpoint before the drop): the other's DROP, and the rows after,
// come where the first read put them. Before, each schema change of a
// transaction took the position after the one before it, so the second
// table's DROP came one lower (never written by its partitions).
func TestASchemaChangeKeepsItsPositionWhenTheTablesChangedBeforeARead(t *testing.T) {
	t.Parallel()
	tables := "a,b,keep"
	u := followFrom(t, tables, nil,
		`CREATE TABLE a (id INT PRIMARY KEY, n INT)`, `CREATE TABLE b (id INT PRIMARY KEY, n INT)`,
		`CREATE TABLE keep (id INT PRIMARY KEY, n INT)`, `INSERT INTO keep VALUES (1, 0)`)
	time.Sleep(150 * time.Millisecond) // past the first tick (above)
	exec(t, u.dsn, `UPDATE keep SET n = 1`, `UPDATE keep SET n = 2`, `DROP TABLE a, b`, `UPDATE keep SET n = 3`, `UPDATE keep SET n = 4`)
	waitResolved(t, u.log)
	first, _, _ := u.log.state()
	// The checkpoint: the first update, before the drop.
	var at model.Ts
	for _, e := range first {
		if e.Table == "shop.keep" && e.Kind != source.KindDDL && e.New[1].Text == "1" {
			at = e.CommitTs
		}
	}
	if at == 0 {
		t.Fatalf("no update of shop.keep in the first read:\n%s", u.log.lines(t, true))
	}
	ch, err := mysql.Retable(context.Background(), uri(u.srv, "root", tables), u.first, []string{"shop.b", "shop.keep"}, at, true)
	if err != nil {
		t.Fatal(err)
	}
	again := pull(t, mysql.NewPuller(parse(t, uri(u.srv, "root", "b,keep")+"&server-id=4243"), "cf", "mariadb", nil), ch.Position)
	waitResolved(t, again)
	second, _, _ := again.state()
	after := func(evs []source.Event) []string {
		var out []string
		for _, e := range evs {
			switch {
			case e.CommitTs <= at || e.Kind == source.KindTxn:
			case e.Kind == source.KindDDL && e.Table == "shop.b":
				out = append(out, fmt.Sprintf("%s %s", e.CommitTs, e.Statement))
			case e.Kind != source.KindDDL && e.Table == "shop.keep":
				out = append(out, fmt.Sprintf("%s n=%s", e.CommitTs, e.New[1].Text))
			}
		}
		return out
	}
	want, got := after(first), after(second)
	if len(want) != 4 || !strings.Contains(want[1], "DROP TABLE") {
		t.Fatalf("the first read, after the checkpoint %s: %q", at, want)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after the checkpoint %s, moved in the read after the tables changed:\nfirst read: %q\nread again: %q", at, want, got)
	}
}
