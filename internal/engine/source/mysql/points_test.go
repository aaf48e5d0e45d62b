package mysql_test

import (
	"encoding/json"
	"testing"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A checkpoint behind more of the server's commits than a reader keeps
// resume points for (a busy server: every commit of any database makes
// one) still finds a point at or below it. The oldest were dropped, and
// under a steady load the stored position stayed where the reader began:
// a restart read hours of log again, or found it purged.
func TestACheckpointBehindManyCommitsStillFindsAResumePoint(t *testing.T) {
	t.Parallel()
	up := followFrom(t, "orders", nil, "CREATE TABLE orders (id INT PRIMARY KEY)", "CREATE TABLE noise (id INT PRIMARY KEY)")
	exec(t, up.dsn, "INSERT INTO orders VALUES (1)",
		// 6,000 commits of a table no changefeed reads, each its own.
		"BEGIN NOT ATOMIC FOR i IN 1..6000 DO INSERT INTO noise VALUES (i); END FOR; END")
	waitResolved(t, up.log)
	evs, _, _ := up.log.state()
	var c0 model.Ts
	for _, e := range evs {
		if e.Table == "shop.orders" {
			c0 = e.CommitTs
		}
	}
	if c0 == 0 {
		t.Fatal("the insert into orders did not arrive")
	}
	b, ok := up.p.ResumePoint(c0)
	if !ok {
		t.Fatalf("no resume point at or below the insert's commit %s, 6,000 commits later", c0)
	}
	var at struct{ Ts model.Ts }
	if err := json.Unmarshal(b, &at); err != nil || at.Ts > c0 {
		t.Fatalf("resume point %s (%v), want one at or below %s", b, err, c0)
	}
	// And the newest point for a checkpoint that caught up.
	_, resolved, _ := up.log.state()
	if b, ok := up.p.ResumePoint(resolved); !ok || json.Unmarshal(b, &at) != nil || at.Ts <= c0 {
		t.Fatalf("resume point at the resolved %s: %s %v", resolved, b, ok)
	}
}
