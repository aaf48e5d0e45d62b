package changefeeds

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/engine/enginetest"
	"github.com/cdcctl/cdcctl/internal/engine/source/mysql"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// A changefeed whose source URI holds a password goes on after the
// password is rotated upstream, as on PostgreSQL: while the server
// refuses the old one it says so and stands still; a wrong new password
// is refused before anything is written; paused, given the new one by an
// update of its source's connection, and resumed, it reads the binary
// log from where it stopped under a live workload. The sink rebuilt
// equals MariaDB's table, nothing twice.
func TestARotatedPasswordIsGivenToTheChangefeed(t *testing.T) {
	t.Parallel()
	srv, db := mysqltest.StartShop(t)
	mysqltest.Exec(t, db, `CREATE USER 'rot'@'%' IDENTIFIED BY 'one'`, `GRANT ALL PRIVILEGES ON *.* TO 'rot'@'%'`,
		`CREATE TABLE a (id INT PRIMARY KEY, n INT)`, `INSERT INTO a SELECT seq, 0 FROM seq_1_to_2000`)
	as := func(password string) string { return fmt.Sprintf("mysql://rot:%s@%s/shop", password, srv.Addr()) }
	tc := enginetest.New(t, enginetest.Options{})
	tc.StartCaptures(2)
	tc.CreateChangefeed("rotated", as("one")+"?tables=a&chunk-rows=500", "file://"+t.TempDir()+"?flush-interval=100ms", 2)
	tc.WaitSnapshot("rotated")
	ctx := context.Background()
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- bumpRows(ctx, db, stop, 2000, "a") }()
	time.Sleep(300 * time.Millisecond)

	// Rotated upstream; the reader's connections are cut, and its next
	// login refused.
	mysqltest.Exec(t, db, `ALTER USER 'rot'@'%' IDENTIFIED BY 'two'`)
	rows, err := db.QueryContext(ctx, `SELECT id FROM information_schema.processlist WHERE user = 'rot'`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)) // one may have ended already
	}
	tc.Eventually("the changefeed says the login is refused", time.Minute, func() bool {
		return strings.Contains(tc.Changefeed("rotated").Status.Error, "check the user and password")
	})
	tc.SetState("rotated", model.ChangefeedPaused)

	tc.GiveNewPassword("rotated", as, "three", "two")
	cfg, err := mysql.ParseURI(tc.Changefeed("rotated").Info.SourceURI)
	if err != nil || cfg.Password != "two" || len(cfg.Tables) != 1 || cfg.Tables[0] != "shop.a" || cfg.ChunkRows != 500 || cfg.ServerID == 0 {
		t.Fatalf("after the update the changefeed's source is %+v (%v)", cfg, err)
	}
	tc.SetState("rotated", model.ChangefeedNormal)
	time.Sleep(time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	up, _, err := mysql.NewTableReader(tc.Changefeed("rotated").Info.SourceURI, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := tc.VerifyDatabase("rotated", up, []string{"shop.a"}, time.Now())
	if !rep.OK || rep.Duplicates != 0 {
		t.Fatalf("after the password was rotated: %+v", rep)
	}
}
