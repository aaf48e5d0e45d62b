package mysql_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A column's type changed with its values (a DECIMAL's scale) is marked
// for its table to be copied again, at the change's position, where the
// log holds the change. A reader started again from before it marks it at
// the same position, which is how a partition that met the first mark
// copies nothing twice (model.CopyProgress.CopyAgain); a type widened
// with the same values is not marked.
func TestATypeChangeIsMarkedToCopyAgainAtItsOwnPosition(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "priced", nil, "CREATE TABLE priced (id INT PRIMARY KEY, price DECIMAL(10,2), note VARCHAR(20))")
	exec(t, up.dsn, "INSERT INTO priced VALUES (1, 1.25, 'a'), (2, 2.55, 'b')",
		"ALTER TABLE priced MODIFY note VARCHAR(40)",
		"INSERT INTO priced VALUES (3, 3.33, 'c')",
		"ALTER TABLE priced MODIFY price DECIMAL(10,1)",
		"INSERT INTO priced VALUES (4, 4.44, 'd')")
	waitResolved(t, up.log)
	evs, _, _ := up.log.state()
	var ddls []model.Ts
	for _, e := range evs {
		if e.Kind == source.KindDDL {
			ddls = append(ddls, e.CommitTs)
		}
	}
	if len(ddls) != 2 {
		t.Fatalf("%d schema changes in the log, want 2", len(ddls))
	}
	marks := waitAgainMarks(t, up.log, 1)
	if len(marks) != 1 || marks[0] != ddls[1] {
		t.Fatalf("copy-again marks at %v; want one, at the scale's change %s (the widening at %s none)", marks, ddls[1], ddls[0])
	}

	other := up.cfg
	other.ServerID = 95
	again := pull(t, mysql.NewPuller(other, "cf", "mariadb", nil), up.first)
	// The first reader's mark, and its own: waitAgainMarks fails the test
	// when they do not come.
	marks2 := waitAgainMarks(t, again, 2)
	for _, at := range marks2 {
		if at != ddls[1] {
			t.Fatalf("the reader started again marked the change at %s, the first at %s", at, ddls[1])
		}
	}
}

// waitAgainMarks waits for at least n copy-again marks in log, then for
// the log to be resolved past the moment they were there, so that a mark
// written too many would be in it too, and returns their positions. The
// reader writes a mark after it has read the change, as a transaction of
// its own: the log can be resolved past the change before the mark is in
// it.
func waitAgainMarks(t *testing.T, log *collected, n int) []model.Ts {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		log.mu.Lock()
		got := len(againMarks(t, log.marks))
		log.mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d copy-again marks in the log after 30 s; want %d", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitResolved(t, log)
	log.mu.Lock()
	defer log.mu.Unlock()
	return againMarks(t, log.marks)
}

// againMarks are the positions of the copy-again marks among evs.
func againMarks(t *testing.T, evs []source.Event) []model.Ts {
	t.Helper()
	var out []model.Ts
	for _, e := range evs {
		var mk source.Mark
		if e.Kind == source.KindMark && json.Unmarshal([]byte(e.Statement), &mk) == nil && mk.Kind == source.MarkAgain {
			out = append(out, mk.At)
		}
	}
	return out
}
