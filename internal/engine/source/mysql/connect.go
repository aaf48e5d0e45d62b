package mysql

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// connected is an open binary log stream and where it starts.
type connected struct {
	at     position
	srv    Server
	passed *gtids // the transactions passed; nil where GTIDs are unknown
	syncer *replication.BinlogSyncer
	stream *replication.BinlogStreamer
}

// connect opens the binary log at a stored resume point, on the server
// the address leads to now: by GTID where the point has them (the same
// transactions on any server of the topology), else by file and offset
// on the server they belong to. The caller closes the syncer.
func (p *Puller) connect(ctx context.Context, from source.Position) (c connected, err error) {
	at := &c.at
	if err := source.DecodePosition(from, at); err != nil {
		return c, fmt.Errorf("mysql source: the stored resume point does not decode: %w", err)
	}
	for t, st := range at.Tables {
		// Resume points stored before definitions named their dialect.
		if st.Def != nil && st.Def.Dialect == "" {
			d := *st.Def
			d.Dialect = source.DialectMySQL
			st.Def = &d
			at.Tables[t] = st
		}
	}
	// The server the address leads to now: after a failover, another
	// than the one the stored file and offset belong to.
	if c.srv, err = serverOf(ctx, p.cfg); err != nil {
		return c, err
	}
	srv := c.srv
	p.flavor = srv.Flavor
	known := at.GTID != ""
	if !known && (at.Server == srv.ServerID || at.Server == 0) {
		// No transaction before the point, or a point stored before
		// GTIDs were kept: its GTIDs from its file and offset, on the
		// server they belong to.
		if at.GTID, known, err = gtidsOf(ctx, p.cfg, srv.Flavor, at.File, at.Pos); err != nil {
			return c, err
		}
	}
	c.passed, err = parseGTIDs(p.flavor, at.GTID, known)
	if err != nil {
		return c, err
	}
	c.syncer = replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: p.cfg.ServerID, Flavor: p.flavor, Host: p.cfg.Host, Port: uint16(p.cfg.Port), User: p.cfg.User, Password: p.cfg.Password,
		TimestampStringLocation: time.UTC, HeartbeatPeriod: time.Second, ReadTimeout: 10 * time.Second,
		// DATETIME and TIMESTAMP as times, written as text by
		// column.text with the column's own digits of fraction: as text,
		// go-mysql formats every DATETIME with fmt.Sprintf, 13 % of the
		// stream's CPU in BenchmarkSourceAgainstBareReader. Zero and
		// pre-1970 values still come as its text.
		ParseTime: true,
		// A failed stream ends Pull: the maintainer starts it again from
		// the checkpoint (go-mysql's own retry hid a purged position).
		DisableRetrySync: true,
		Logger:           slog.New(slog.DiscardHandler),
	})
	if at.GTID != "" {
		// By GTID: the same transactions on any server of the
		// replication topology.
		set, err := c.passed.syncSet()
		if err != nil {
			c.syncer.Close()
			return c, err
		}
		if c.stream, err = c.syncer.StartSyncGTID(set); err != nil {
			c.syncer.Close()
			return c, p.explainStream(err, *at)
		}
	} else {
		if at.Server != 0 && srv.ServerID != at.Server {
			c.syncer.Close()
			return c, fmt.Errorf("%s is server %d, not server %d where the changefeed's binary log position %s:%d is, and the position has no GTIDs to resume by elsewhere (turn gtid_mode on in MySQL, or point the source at server %d again)", p.cfg.Addr(), srv.ServerID, at.Server, at.File, at.Pos, at.Server)
		}
		if c.stream, err = c.syncer.StartSync(gomysql.Position{Name: at.File, Pos: at.Pos}); err != nil {
			c.syncer.Close()
			return c, p.explainStream(err, *at)
		}
	}
	return c, nil
}
