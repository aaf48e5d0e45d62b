package mysql

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
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
	var version, executed string
	if err := db.QueryRowContext(ctx, "SELECT @@version, @@server_id").Scan(&version, &p.Server); err != nil {
		return p, err
	}
	var err error
	if p.File, p.Pos, executed, err = masterStatus(ctx, db); err != nil {
		return p, err
	}
	p.GTID, _, err = gtidsAt(ctx, db, flavorOf(version), p.File, p.Pos, executed)
	return p, err
}

// covers says the transaction that begins at file:pos of server (its
// GTID gtid) is at or before the point: on the point's own server by
// file and offset, on another by GTIDs; false when neither can tell (a
// failover without GTIDs: the transaction is read, as before the point
// was kept).
func (p *logPoint) covers(flavor string, server uint32, file string, pos uint32, gtid string) bool {
	if p == nil {
		return false
	}
	if server == p.Server && file != "" {
		if c := compareLogFiles(file, p.File); c != 0 {
			return c < 0
		}
		return pos <= p.Pos
	}
	if gtid == "" || p.GTID == "" {
		return false
	}
	if flavor == "mariadb" {
		one, err := gomysql.ParseMariadbGTID(gtid)
		if err != nil {
			return false
		}
		for _, part := range strings.Split(p.GTID, ",") {
			at, err := gomysql.ParseMariadbGTID(strings.TrimSpace(part))
			if err == nil && at.DomainID == one.DomainID {
				return one.SequenceNumber <= at.SequenceNumber
			}
		}
		return false
	}
	set, err := gomysql.ParseMysqlGTIDSet(p.GTID)
	if err != nil {
		return false
	}
	one, err := gomysql.ParseMysqlGTIDSet(gtid)
	if err != nil {
		return false
	}
	return set.Contain(one)
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
// transaction just begun is past (inCopy false), and returns the tables
// still ahead.
func passAdded(tables map[string]tableState, adding []string, inCopy func(tableState) bool) (map[string]tableState, []string) {
	kept := adding[:0]
	for _, t := range adding {
		st, ok := tables[t]
		if !ok || st.AddedAt == nil {
			continue
		}
		if inCopy(st) {
			kept = append(kept, t)
			continue
		}
		st.AddedAt = nil
		tables = withTable(tables, t, st)
	}
	return tables, kept
}
