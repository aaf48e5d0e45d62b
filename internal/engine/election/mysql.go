package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// MySQL elects the coordinator through one row of a lock table in MySQL
// or MariaDB (seed 001's helix_locks), for operators who trust their
// database more than etcd's election. The seed's statement has two
// defects that this backend does not copy:
//
//   - its takeover condition compares the holder's expiry with the
//     challenger's new one, which is later almost always: any node took a
//     live lock. Here a lock changes hands only once it has expired on the
//     database's clock (expires_at < NOW(6)); no node's clock is ever used.
//   - it bumped the epoch on every renewal, so the epoch could not fence.
//     Here the epoch grows only when a new term begins (the lock taken
//     after it expired); a renewal keeps it, and succeeds only for the
//     current owner and epoch (a compare-and-set on both).
//
// A leader renews every TTL/3 and steps down by its own monotonic clock
// before its lock can expire on the database: a renewal begun at t gives
// it until t + TTL - margin. Whoever wins raises the term in etcd to its
// epoch (meta.Store.RaiseTerm); every coordinator write compares that
// term, so a leader that slept through its lease writes nothing.
type MySQL struct {
	db    *sql.DB
	self  model.NodeID
	owner string // self and its incarnation: a restarted process is a new owner
	key   string
	ttl   time.Duration
	poll  time.Duration
	raise func(ctx context.Context, epoch uint64) (meta.Fence, error)
	end   func(ctx context.Context, f meta.Fence) error
	log   *slog.Logger
	// now is the monotonic clock the step-down deadline is measured on.
	now func() time.Time
	// addr and dbName name the database in messages.
	addr, dbName string

	mu       sync.Mutex
	cur      *mysqlTerm
	resigned time.Time // when this node last gave a term back
}

// MySQLConfig configures a MySQL elector.
type MySQLConfig struct {
	// DSN is go-sql-driver's: user:password@tcp(host:3306)/db.
	DSN         string
	ClusterID   string
	Self        model.NodeID
	Incarnation int64
	TTL         time.Duration
	// Raise starts a won term in etcd with its epoch; End ends it.
	Raise func(ctx context.Context, epoch uint64) (meta.Fence, error)
	End   func(ctx context.Context, f meta.Fence) error
	Log   *slog.Logger
	// Now is for tests (a shifted clock); nil is time.Now.
	Now func() time.Time
}

// mysqlTerm is one held term.
type mysqlTerm struct {
	epoch    uint64
	fence    meta.Fence
	done     chan struct{}
	stop     chan struct{}
	once     sync.Once
	deadline time.Time // step down by then, on the monotonic clock
}

// LockTable is the lock table's name (seed 001).
const LockTable = "helix_locks"

const createLockTable = `CREATE TABLE IF NOT EXISTS ` + LockTable + ` (
    id           bigint unsigned NOT NULL AUTO_INCREMENT,
    lock_key     VARCHAR(255)    NOT NULL,
    owner_id     VARCHAR(255)    NOT NULL,
    expires_at   TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    epoch        bigint          NOT NULL DEFAULT 0,
    status       TINYINT         NOT NULL DEFAULT 1,
    created_at   datetime        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at   datetime        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    UNIQUE KEY lock_key_status_unique_key (lock_key, status),
    KEY lock_key_ids (lock_key)
)`

// acquireLock takes the lock if nobody holds it, or if its holder's lease
// has expired on the database's clock, or extends it for its own owner.
// MySQL and MariaDB apply the assignments left to right, each seeing the
// ones before: epoch and owner_id test the row as it was, expires_at the
// owner just decided.
const acquireLock = `INSERT INTO ` + LockTable + ` (lock_key, owner_id, expires_at, epoch, status)
VALUES (?, ?, NOW(6) + INTERVAL ? MICROSECOND, 1, 1)
ON DUPLICATE KEY UPDATE
    epoch      = IF(expires_at < NOW(6), epoch + 1, epoch),
    owner_id   = IF(expires_at < NOW(6), VALUES(owner_id), owner_id),
    expires_at = IF(owner_id = VALUES(owner_id), VALUES(expires_at), expires_at)`

// renewLock extends the lock for its owner in its epoch, and only while it
// has not expired: after that another node may hold it.
const renewLock = `UPDATE ` + LockTable + ` SET expires_at = NOW(6) + INTERVAL ? MICROSECOND
WHERE lock_key = ? AND status = 1 AND owner_id = ? AND epoch = ? AND expires_at >= NOW(6)`

// releaseLock expires the lock at once (a leader stepping down), so the
// next candidate need not wait out the TTL.
const releaseLock = `UPDATE ` + LockTable + ` SET expires_at = NOW(6) - INTERVAL 1 MICROSECOND
WHERE lock_key = ? AND status = 1 AND owner_id = ? AND epoch = ?`

const readLock = `SELECT owner_id, epoch, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at) FROM ` + LockTable + ` WHERE lock_key = ? AND status = 1`

// NewMySQL returns an elector for the database of cfg.DSN; it refuses a
// bad DSN. It does not connect: Prepare does, once, when the agent starts.
func NewMySQL(cfg MySQLConfig) (*MySQL, error) {
	dc, err := ParseMySQLDSN(cfg.DSN)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("--election-dsn: %w", err)
	}
	db.SetMaxOpenConns(4)
	db.SetConnMaxIdleTime(time.Minute)
	ttl := cfg.TTL
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &MySQL{
		db: db, self: cfg.Self, owner: fmt.Sprintf("%s/%x", cfg.Self, cfg.Incarnation), key: "cdcctl/" + cfg.ClusterID + "/coordinator",
		ttl: ttl, poll: min(ttl/4, 500*time.Millisecond), raise: cfg.Raise, end: cfg.End, log: log, now: now, addr: dc.Addr, dbName: dc.DBName,
	}, nil
}

// Prepare connects to the database, refusing an unreachable server or
// bad credentials with a message that says what to check, and creates the
// lock table if it is missing.
func (m *MySQL) Prepare(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.db.PingContext(pctx); err != nil {
		return fmt.Errorf("cannot reach the election database at %s: %v; check --election-dsn (user, password, host, port, database) and that the server is up", m.addr, err)
	}
	if _, err := m.db.ExecContext(pctx, createLockTable); err != nil {
		return fmt.Errorf("create the election table %s in database %q: %v; grant CREATE on it, or create it yourself", LockTable, m.dbName, err)
	}
	return nil
}

// ParseMySQLDSN checks an election DSN and sets what this backend needs:
// found rows (a renewal in the same microsecond is still a success),
// and short network timeouts so that an unreachable server is noticed
// well within the TTL.
func ParseMySQLDSN(dsn string) (*mysql.Config, error) {
	if dsn == "" {
		return nil, errors.New("--election-dsn is empty; give user:password@tcp(host:3306)/database")
	}
	dc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("--election-dsn %q: %v; the form is [user[:password]@]tcp(host:3306)/database", redactDSN(dsn), err)
	}
	if dc.DBName == "" {
		return nil, fmt.Errorf("--election-dsn %q names no database; the form is [user[:password]@]tcp(host:3306)/database", redactDSN(dsn))
	}
	dc.ClientFoundRows = true
	if dc.Timeout == 0 {
		dc.Timeout = 3 * time.Second
	}
	if dc.ReadTimeout == 0 {
		dc.ReadTimeout = 3 * time.Second
	}
	if dc.WriteTimeout == 0 {
		dc.WriteTimeout = 3 * time.Second
	}
	return dc, nil
}

// redactDSN hides a DSN's password.
func redactDSN(dsn string) string {
	dc, err := mysql.ParseDSN(dsn)
	if err != nil || dc.Passwd == "" {
		if at := lastIndex(dsn, '@'); at > 0 {
			return "xxxxx" + dsn[at:]
		}
		return dsn
	}
	dc.Passwd = "xxxxx"
	return dc.FormatDSN()
}

func lastIndex(s string, b byte) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == b {
			return i
		}
	}
	return -1
}

// Close closes the database handle.
func (m *MySQL) Close() error { return m.db.Close() }

// Campaign implements Elector: it tries the lock every poll interval
// until it holds it; a database that does not answer means nobody leads
// (the holder steps down by its clock), and the campaign goes on.
func (m *MySQL) Campaign(ctx context.Context) (Term, error) {
	m.mu.Lock()
	resigned := m.resigned
	m.mu.Unlock()
	// A node that just gave a term back lets the others try first.
	if wait := time.Until(resigned.Add(3 * m.poll)); wait > 0 {
		sleep(ctx, wait)
	}
	var lastErr string
	for ctx.Err() == nil {
		t, won, err := m.tryAcquire(ctx)
		switch {
		case err != nil:
			if err.Error() != lastErr {
				m.log.Warn("election: the election database does not answer; nobody leads until it does", "err", err)
				lastErr = err.Error()
			}
		case won:
			return t, nil
		}
		sleep(ctx, m.poll)
	}
	return Term{}, ctx.Err()
}

// tryAcquire runs the acquire statement once; won says this node holds
// the lock now, and its term has begun.
func (m *MySQL) tryAcquire(ctx context.Context) (Term, bool, error) {
	began := m.now()
	actx, cancel := context.WithTimeout(ctx, m.ttl/2)
	defer cancel()
	if _, err := m.db.ExecContext(actx, acquireLock, m.key, m.owner, m.ttl.Microseconds()); err != nil {
		return Term{}, false, fmt.Errorf("take the coordinator lock: %w", err)
	}
	var owner string
	var epoch uint64
	var left int64
	if err := m.db.QueryRowContext(actx, readLock, m.key).Scan(&owner, &epoch, &left); err != nil {
		return Term{}, false, fmt.Errorf("read the coordinator lock: %w", err)
	}
	if owner != m.owner || left <= 0 {
		return Term{}, false, nil
	}
	deadline := began.Add(m.ttl - m.margin())
	if d := m.now().Add(time.Duration(left)*time.Microsecond - m.margin()); d.Before(deadline) {
		deadline = d
	}
	if !m.now().Before(deadline) {
		return Term{}, false, nil // won too slowly to lead safely; the next try renews
	}
	fence, err := m.raise(actx, epoch)
	if err != nil {
		// A newer term is in etcd (or etcd did not answer): give the lock
		// back rather than lead without a fence.
		m.release(epoch)
		if errors.Is(err, meta.ErrStaleEpoch) {
			m.log.Warn("election: won the lock, but etcd holds a newer term; giving the lock back", "epoch", epoch, "err", err)
			return Term{}, false, nil
		}
		return Term{}, false, err
	}
	t := &mysqlTerm{epoch: epoch, fence: fence, done: make(chan struct{}), stop: make(chan struct{}), deadline: deadline}
	m.mu.Lock()
	m.cur = t
	m.mu.Unlock()
	m.log.Info("election: took the coordinator lock", "epoch", epoch, "owner", m.owner, "fence", fence.String())
	go m.keep(t)
	return Term{Leader: m.self, Fence: fence, Done: t.done}, true, nil
}

// margin is how long before the lock's expiry a leader that could not
// renew steps down: the database's clock may run faster than ours.
func (m *MySQL) margin() time.Duration { return max(m.ttl/5, 200*time.Millisecond) }

// keep renews a term every TTL/3 until it ends: a renewal refused (the
// lock is another's), the step-down deadline passed without a renewal,
// or Resign.
func (m *MySQL) keep(t *mysqlTerm) {
	defer close(t.done)
	tick := time.NewTicker(m.ttl / 3)
	defer tick.Stop()
	for {
		wait := t.deadline.Sub(m.now())
		if wait <= 0 {
			m.log.Warn("election: could not renew the coordinator lock in time; stepping down before it expires", "epoch", t.epoch)
			return
		}
		expire := time.NewTimer(wait)
		select {
		case <-t.stop:
			expire.Stop()
			return
		case <-expire.C:
			continue
		case <-tick.C:
			expire.Stop()
		}
		began := m.now()
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Until(t.deadline), time.Millisecond))
		res, err := m.db.ExecContext(ctx, renewLock, m.ttl.Microseconds(), m.key, m.owner, t.epoch)
		cancel()
		if err != nil {
			m.log.Warn("election: renewing the coordinator lock failed; retrying until its deadline", "epoch", t.epoch, "err", err)
			continue
		}
		if n, _ := res.RowsAffected(); n != 1 {
			m.log.Warn("election: the coordinator lock is no longer this node's; stepping down", "epoch", t.epoch)
			return
		}
		t.deadline = began.Add(m.ttl - m.margin())
	}
}

// Resign implements Elector: the term ends, the lock expires at once and
// the term key leaves etcd; the next campaign waits a little so the other
// candidates go first.
func (m *MySQL) Resign(ctx context.Context) error {
	m.mu.Lock()
	t := m.cur
	m.cur = nil
	m.resigned = time.Now()
	m.mu.Unlock()
	if t == nil {
		return ErrNotLeader
	}
	t.once.Do(func() { close(t.stop) })
	<-t.done
	m.release(t.epoch)
	if m.end != nil {
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = m.end(ectx, t.fence)
	}
	return nil
}

// release expires the lock if it is still this node's in epoch.
func (m *MySQL) release(epoch uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := m.db.ExecContext(ctx, releaseLock, m.key, m.owner, epoch); err != nil {
		m.log.Warn("election: could not release the coordinator lock; it expires by itself", "epoch", epoch, "err", err)
	}
}

// Withdraw implements Elector: a MySQL campaign leaves nothing behind but
// a held lock, which Resign gives back.
func (m *MySQL) Withdraw(ctx context.Context) error {
	if err := m.Resign(ctx); err != nil && !errors.Is(err, ErrNotLeader) {
		return err
	}
	return nil
}
