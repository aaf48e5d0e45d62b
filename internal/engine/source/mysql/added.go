package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/cdcctl/cdcctl/internal/model"
)

// A table added to a paused changefeed (changefeed update) is read from
// the catalog as it is then, and copied after the changefeed resumes; its
// reader resumes from the checkpoint, before. What the binary log holds of
// the table between the two is in its definition and will be in its copy:
// a statement that held it (CREATE OR REPLACE, EXCHANGE PARTITION, a key
// moved), the rows of an earlier table of its name. Read again, they held
// the table again, so the remedy a held table's reason names (removed and
// added back in one pause) never worked, or they wrote rows the table no
// longer has. So a table added keeps where the binary log ended then
// (tableState.AddedAt), and the reader passes over its transactions up to
// there.

// addTables reads the added tables' definitions into tables, each with
// where the binary log ended when it was read (AddedAt) and the
// changefeed's checkpoint at (its Since and ResetAt). The point is read
// first, then the preflight's checks: an XA transaction prepared before
// the point and committed after would have its rows passed over by the
// reader while the copy, reading before its commit, cannot see them;
// the preflight refuses while one is prepared, so any prepared before
// the point has its outcome before the copy reads. The point is read
// again after the definitions, until no statement can have come between
// (a few tries; a server busy writing keeps moving it, and a statement
// between would be applied twice).
func addTables(ctx context.Context, db *sql.DB, cfg Config, added []string, at model.Ts, tables map[string]tableState) error {
	var end logPoint
	read := map[string]tableState{}
	for try := 0; try < 3; try++ {
		var err error
		if end, err = endOfLog(ctx, db); err != nil {
			return fmt.Errorf("read where the binary log ends (SHOW MASTER STATUS; the user needs REPLICATION CLIENT): %w", explain(cfg, err))
		}
		if try == 0 {
			check := cfg
			check.Tables = added
			if _, _, err := Preflight(ctx, check); err != nil {
				return err
			}
		}
		for _, t := range added {
			if read[t], err = readTable(ctx, db, t); err != nil {
				return explain(cfg, err)
			}
		}
		again, err := endOfLog(ctx, db)
		if err != nil {
			return fmt.Errorf("read where the binary log ends (SHOW MASTER STATUS; the user needs REPLICATION CLIENT): %w", explain(cfg, err))
		}
		if again == end {
			break
		}
	}
	for _, t := range added {
		st := read[t]
		st.Since, st.ResetAt, st.AddedAt = at, at, &end
		tables[t] = st
	}
	return nil
}

// logPoint is where a server's binary log ended: its file and offset on
// that server, and its GTID position, the same on every server fed from
// it ("" when GTIDs are off).
type logPoint struct {
	File   string `json:"file"`
	Pos    uint32 `json:"pos"`
	Server uint32 `json:"server"`
	GTID   string `json:"gtid,omitempty"`
}

// endOfLog reads where the binary log of the server db is connected to
// ends now.
func endOfLog(ctx context.Context, db *sql.DB) (logPoint, error) {
	var p logPoint
	var version string
	if err := db.QueryRowContext(ctx, "SELECT @@version, @@server_id").Scan(&version, &p.Server); err != nil {
		return p, err
	}
	st, err := masterStatus(ctx, db)
	if err != nil {
		return p, err
	}
	p.File, p.Pos = st.File, st.Pos
	p.GTID, _, err = gtidsAt(ctx, db, flavorOf(version), p.File, p.Pos, st.Executed)
	return p, err
}

// covers says the transaction that begins at file:pos of server (its
// GTID gtid) is at or before the point: by GTIDs where both have them
// (the set the server had executed at the point: the same on every
// server fed from it, and after a RESET MASTER), else by file and offset
// on the point's own server; false when neither can tell (the
// transaction is read, as before the point was kept). An offset of 0 is
// not one.
func (p *logPoint) covers(flavor string, server uint32, file string, pos uint32, gtid string) bool {
	if p == nil {
		return false
	}
	if gtid != "" && p.GTID != "" {
		return gtidCovered(flavor, p.GTID, gtid)
	}
	if server == p.Server && file != "" && pos != 0 {
		if c := compareLogFiles(file, p.File); c != 0 {
			return c < 0
		}
		return pos <= p.Pos
	}
	return false
}

// passedOnItsServer says the reader, reading the point's own server's
// log at a transaction the point does not cover (covered false), has
// passed it for good: that log's order is the order in which the point's
// transactions were written, so none after is before it. On another
// server (a failover) the order can differ (a replica applying in
// parallel, MariaDB's domains): there each transaction is decided alone.
func (p *logPoint) passedOnItsServer(server uint32, file string, covered bool) bool {
	return p != nil && !covered && server == p.Server && file != ""
}

// gtidCovered says the transaction gtid is in the position set.
func gtidCovered(flavor, set, gtid string) bool {
	if flavor == "mariadb" {
		one, err := gomysql.ParseMariadbGTID(gtid)
		if err != nil {
			return false
		}
		for _, part := range strings.Split(set, ",") {
			at, err := gomysql.ParseMariadbGTID(strings.TrimSpace(part))
			if err == nil && at.DomainID == one.DomainID {
				return one.SequenceNumber <= at.SequenceNumber
			}
		}
		return false
	}
	all, err := gomysql.ParseMysqlGTIDSet(set)
	if err != nil {
		return false
	}
	one, err := gomysql.ParseMysqlGTIDSet(gtid)
	if err != nil {
		return false
	}
	return all.Contain(one)
}

// compareLogFiles orders two binary log files of one server: by the
// number after their base name's dot (mysql-bin.000999 before
// mysql-bin.1000000), else by name.
func compareLogFiles(a, b string) int {
	ia, ib := strings.LastIndexByte(a, '.'), strings.LastIndexByte(b, '.')
	if ia > 0 && ib > 0 && a[:ia] == b[:ib] {
		na, ea := strconv.ParseUint(a[ia+1:], 10, 64)
		nb, eb := strconv.ParseUint(b[ib+1:], 10, 64)
		if ea == nil && eb == nil {
			switch {
			case na < nb:
				return -1
			case na > nb:
				return 1
			}
			return 0
		}
	}
	return strings.Compare(a, b)
}

// addedAhead names the tables added at a point the reader has not passed.
func addedAhead(tables map[string]tableState) []string {
	var out []string
	for t, st := range tables {
		if st.AddedAt != nil {
			out = append(out, t)
		}
	}
	return out
}

// passAdded forgets the points of the tables (of adding) that the
// transaction just begun has passed for good (passed), and returns the
// tables still ahead.
func passAdded(tables map[string]tableState, adding []string, passed func(tableState) bool) (map[string]tableState, []string) {
	kept := adding[:0]
	for _, t := range adding {
		st, ok := tables[t]
		if !ok || st.AddedAt == nil {
			continue
		}
		if !passed(st) {
			kept = append(kept, t)
			continue
		}
		st.AddedAt = nil
		tables = withTable(tables, t, st)
	}
	return tables, kept
}
