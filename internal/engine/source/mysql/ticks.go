package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/model"
)

// signalTable is where the puller writes its ticks: a row per
// changefeed (named by its start, fixed in its URI: tickName), updated with the
// server's clock. A transaction that only changes it resolves the stream
// up to its position, so an idle database's changefeed still advances.
// Verify asks for a cut there too (cut.go).
const signalTable = "cdcctl_signal"

// tickName is the signal table's row of a changefeed's ticks.
func tickName(cfg Config) string { return fmt.Sprintf("tick/%d", cfg.Start) }

// tickEvery is how often the puller writes a tick.
const tickEvery = 500 * time.Millisecond

// tickOf reads this changefeed's tick from a change of the signal table:
// the server's clock in µs; 0 when the change is not its tick.
func tickOf(e *replication.RowsEvent, name string) int64 {
	var at int64
	for _, r := range e.Rows {
		if len(r) == 2 && signalName(r[0]) == name {
			if v, ok := r[1].(int64); ok {
				at = max(at, v)
			}
		}
	}
	return at
}

// tick writes this changefeed's tick into the signal table every
// tickEvery until ctx ends.
func (p *Puller) tick(ctx context.Context) {
	db, err := signalDB(p.cfg)
	if err != nil {
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	signal := quoteTable(model.TableName(p.cfg.Database, signalTable))
	stmt := "INSERT INTO " + signal + " (changefeed, at) VALUES (?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) ON DUPLICATE KEY UPDATE at = VALUES(at)"
	answer := "UPDATE " + signal + " SET at = ? WHERE changefeed = ? AND at = 0"
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	var last time.Time
	for {
		if _, err := db.ExecContext(ctx, stmt, tickName(p.cfg)); err != nil && ctx.Err() == nil && time.Since(last) > 30*time.Second {
			last = time.Now()
			p.log.Warn("mysql source: cannot write a tick; the changefeed advances only with other writes", "changefeed", p.cf, "err", explain(p.cfg, err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case a := <-p.answers:
			if _, err := db.ExecContext(ctx, answer, a.at, a.name); err != nil && ctx.Err() == nil {
				p.log.Warn("mysql source: cannot answer verify's cut; verify will ask again", "changefeed", p.cf, "err", explain(p.cfg, err))
			}
		}
	}
}
