package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/embedetcd/etcdtest"
	"github.com/cdcctl/cdcctl/internal/engine/cluster"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
	"github.com/cdcctl/cdcctl/internal/mysqlserver"
	"github.com/cdcctl/cdcctl/internal/mysqlserver/mysqltest"
)

// mysqlRig is a private MariaDB and an embedded etcd with three
// registered nodes, n1..n3.
type mysqlRig struct {
	t       *testing.T
	srv     *mysqlserver.Server
	db      *sql.DB
	store   *meta.Store
	members map[model.NodeID]*cluster.Member
	log     testLog
}

func newMySQLRig(t *testing.T) *mysqlRig {
	t.Helper()
	srv, dsn := mysqltest.Start(t, "cdc")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	_, cli := etcdtest.Start(t)
	rig := &mysqlRig{t: t, srv: srv, db: db, store: meta.NewStore(cli, "test"), members: map[model.NodeID]*cluster.Member{}, log: newTestLog(t)}
	for _, id := range []model.NodeID{"n1", "n2", "n3"} {
		// A session outlives a starved machine: a CI run once lost n2's
		// lease while other packages' tests held both cores, and n2's
		// every raise of the term failed from then on.
		m, err := cluster.Join(context.Background(), rig.store, model.NodeInfo{ID: id, Address: string(id)}, 30*time.Second, meta.Previous{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Leave() })
		rig.members[id] = m
	}
	return rig
}

// testLog writes a logger's lines to the test's log until the test ends
// (a goroutine may still log as the rig closes; the test's log is closed
// by then).
type testLog struct {
	t    *testing.T
	mu   *sync.Mutex
	done *bool
}

func newTestLog(t *testing.T) testLog {
	l := testLog{t: t, mu: &sync.Mutex{}, done: new(bool)}
	// Registered before the electors' cleanups, so it runs after them.
	t.Cleanup(func() { l.mu.Lock(); *l.done = true; l.mu.Unlock() })
	return l
}

func (l testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !*l.done {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// elector is node id's MySQL elector, with a clock shifted by skew.
func (rig *mysqlRig) elector(id model.NodeID, ttl, skew time.Duration) *MySQL {
	rig.t.Helper()
	m := rig.members[id]
	e, err := NewMySQL(MySQLConfig{
		DSN: rig.srv.DSN("cdc"), ClusterID: "test", Self: id, Incarnation: m.Info().Incarnation, TTL: ttl,
		Raise: func(ctx context.Context, epoch uint64) (meta.Fence, error) {
			return rig.store.RaiseTerm(ctx, epoch, id, m.Session().Lease())
		},
		End: rig.store.EndTerm,
		Now: func() time.Time { return time.Now().Add(skew) },
		// Its warnings (a failed raise, a database that does not
		// answer) go to the test's log: a failing run says why.
		Log: slog.New(slog.NewTextHandler(rig.log, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id),
	})
	if err != nil {
		rig.t.Fatal(err)
	}
	if err := e.Prepare(context.Background()); err != nil {
		rig.t.Fatal(err)
	}
	rig.t.Cleanup(func() { _ = e.Close() })
	return e
}

// lock reads the lock row: owner and epoch.
func (rig *mysqlRig) lock() (string, uint64) {
	rig.t.Helper()
	var owner string
	var epoch uint64
	if err := rig.db.QueryRow(`SELECT owner_id, epoch FROM helix_locks WHERE status = 1`).Scan(&owner, &epoch); err != nil {
		rig.t.Fatal(err)
	}
	return owner, epoch
}

// campaign runs a campaign in the background; the term arrives on the
// channel.
func campaign(ctx context.Context, e *MySQL) <-chan Term {
	ch := make(chan Term, 1)
	go func() {
		if t, err := e.Campaign(ctx); err == nil {
			ch <- t
		}
	}()
	return ch
}

// The regression test of seed 001's statement, run as written (with its
// TTL as an interval): a second node takes a lock whose holder is alive
// and renewing, because the holder's expiry is compared with the
// challenger's new one. Ours, in the same race, leaves the lock with its
// holder and its epoch as it was.
func TestTheSeedStatementStealsALiveLockAndOursDoesNot(t *testing.T) {
	rig := newMySQLRig(t)
	if _, err := rig.db.Exec(`CREATE TABLE seed_locks (
		id bigint unsigned NOT NULL AUTO_INCREMENT, lock_key VARCHAR(255) NOT NULL, owner_id VARCHAR(255) NOT NULL,
		expires_at TIMESTAMP NOT NULL, epoch bigint NOT NULL DEFAULT 0, status TINYINT NOT NULL DEFAULT 1,
		PRIMARY KEY (id), UNIQUE KEY lock_key_status_unique_key (lock_key, status))`); err != nil {
		t.Fatal(err)
	}
	seed := func(owner string) {
		if _, err := rig.db.Exec(`INSERT INTO seed_locks (lock_key, owner_id, expires_at, epoch, status)
			VALUES ('coordinator_lock', ?, NOW() + INTERVAL 10 SECOND, 1, 1)
			ON DUPLICATE KEY
			UPDATE owner_id   = IF(owner_id = VALUES(owner_id) OR expires_at < VALUES(expires_at), VALUES(owner_id), owner_id),
			       expires_at = IF(owner_id = VALUES(owner_id) OR expires_at < VALUES(expires_at), VALUES(expires_at), expires_at),
			       epoch      = IF(owner_id = VALUES(owner_id) OR expires_at < VALUES(expires_at), epoch + 1, epoch)`, owner); err != nil {
			t.Fatal(err)
		}
	}
	seed("A")
	time.Sleep(1100 * time.Millisecond) // A's lock has 9 s left; B's would end a second later than A's
	seed("B")
	var owner string
	if err := rig.db.QueryRow(`SELECT owner_id FROM seed_locks`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner != "B" {
		t.Fatalf("the seed's statement left the live lock with %s; the regression test expects it to be stolen by B", owner)
	}

	// Ours: n1 holds and renews (TTL 10 s); n2 campaigns meanwhile.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := rig.elector("n1", 10*time.Second, 0)
	ta := <-campaign(ctx, a)
	owner1, epoch1 := rig.lock()
	b := rig.elector("n2", 10*time.Second, 0)
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
	defer bcancel()
	if _, err := b.Campaign(bctx); err == nil {
		t.Fatal("n2 won the lock while n1 held it")
	}
	if owner2, epoch2 := rig.lock(); owner2 != owner1 || epoch2 != epoch1 {
		t.Fatalf("n2's campaign changed the lock: %s@%d → %s@%d", owner1, epoch1, owner2, epoch2)
	}
	select {
	case <-ta.Done:
		t.Fatal("n1's term ended while n2 campaigned")
	default:
	}
}

// A leader's renewals keep its epoch; when its lock expires (it stopped
// renewing, as a frozen process would) another node takes it with the
// next epoch, the old leader's renewal is refused and its term ends, and
// a write under the old term's fence is refused by etcd while the new
// one's lands. A node whose clock is 30 s off neither steals a live lock
// nor keeps one it lost: only the database's clock counts.
func TestATakeoverBumpsTheEpochAndFencesTheOldLeader(t *testing.T) {
	rig := newMySQLRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = 2 * time.Second
	// n1's clock is 30 s ahead.
	a := rig.elector("n1", ttl, 30*time.Second)
	ta := <-campaign(ctx, a)
	_, epoch := rig.lock()
	time.Sleep(2 * ttl) // several renewals
	if _, e := rig.lock(); e != epoch {
		t.Fatalf("renewals changed the epoch: %d → %d", epoch, e)
	}
	select {
	case <-ta.Done:
		t.Fatal("the leader's term ended while it renewed")
	default:
	}
	// n2's clock is 30 s behind: it does not take the live lock either.
	b := rig.elector("n2", ttl, -30*time.Second)
	won := campaign(ctx, b)
	select {
	case <-won:
		t.Fatal("n2 (clock 30 s behind) took n1's live lock")
	case <-time.After(2 * ttl):
	}

	// n1's lock expires on the database, as if it had stopped renewing
	// (a frozen process): n2 takes it, and n1's next renewal is refused.
	if _, err := rig.db.Exec(`UPDATE helix_locks SET expires_at = NOW(6) WHERE status = 1`); err != nil {
		t.Fatal(err)
	}
	var tb Term
	select {
	case tb = <-won:
	case <-time.After(time.Minute):
		owner, e := rig.lock()
		t.Fatalf("n2 did not take the expired lock within a minute; the lock is %s@%d (see n2's warnings above)", owner, e)
	}
	if owner, e := rig.lock(); e != epoch+1 || owner != b.owner {
		t.Fatalf("after the takeover the lock is %s@%d; want %s@%d", owner, e, b.owner, epoch+1)
	}
	select {
	case <-ta.Done:
	case <-time.After(2 * ttl):
		t.Fatal("n1's term did not end once its renewal was refused")
	}
	// n1's fence is refused; n2's lands.
	if _, err := rig.store.SetLiveness(ctx, "n3", model.LivenessDraining, model.ReasonNormal, ta.Fence); !errors.Is(err, meta.ErrFenced) {
		t.Fatalf("a write under the old term: %v; want it fenced", err)
	}
	if _, err := rig.store.SetLiveness(ctx, "n3", model.LivenessDraining, model.ReasonNormal, tb.Fence); err != nil {
		t.Fatalf("a write under the new term: %v", err)
	}
	st, err := rig.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := st.Leader(); !ok || l.Node != "n2" || l.Fence != tb.Fence {
		t.Fatalf("etcd names %+v as the coordinator; want n2 with %v", l, tb.Fence)
	}
	// An old epoch can never be raised again in etcd.
	if _, err := rig.store.RaiseTerm(ctx, epoch, "n1", rig.members["n1"].Session().Lease()); !errors.Is(err, meta.ErrStaleEpoch) {
		t.Fatalf("raising the old epoch again: %v; want ErrStaleEpoch", err)
	}
}

// The database goes away under a leader: it steps down by its own clock
// before its lock could expire there, nobody leads while the database is
// unreachable, and once it is back a leader is elected again. At every
// moment at most one term is open.
func TestTheLeaderStepsDownWhenTheDatabaseIsGone(t *testing.T) {
	rig := newMySQLRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = 2 * time.Second
	var mu sync.Mutex
	open := map[model.NodeID]Term{}
	overlap := ""
	var wg sync.WaitGroup
	for _, id := range []model.NodeID{"n1", "n2"} {
		e := rig.elector(id, ttl, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t, err := e.Campaign(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				for other := range open {
					overlap += fmt.Sprintf("%s won epoch %d while %s's term was open; ", id, t.Epoch(), other)
				}
				open[id] = t
				mu.Unlock()
				select {
				case <-t.Done:
				case <-ctx.Done():
				}
				mu.Lock()
				delete(open, id)
				mu.Unlock()
				_ = e.Resign(context.Background())
			}
		}()
	}
	leading := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(open)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30 s", what)
			}
		}
	}
	waitFor("a leader", func() bool { return leading() == 1 })
	if err := rig.srv.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor("the leader to step down with the database gone", func() bool { return leading() == 0 })
	time.Sleep(ttl) // nobody leads meanwhile
	if n := leading(); n != 0 {
		t.Fatalf("%d leaders while the database is down", n)
	}
	if err := rig.srv.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("a leader after the database is back", func() bool { return leading() == 1 })
	cancel()
	wg.Wait()
	if overlap != "" {
		t.Fatal(overlap)
	}
}
