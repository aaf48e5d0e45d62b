package mysql

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	driver "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
)

// gtids are the transactions a position has passed, named as the servers
// name them: the same on a primary and on every replica fed from it
// (log_slave_updates), so a position holding them resumes on whichever
// server the source's address leads to after a failover, where a binary
// log file and offset mean nothing.
//
// MariaDB's position is the last GTID of each replication domain
// (domain-server-seq; its gtid_slave_pos form, one per domain: a new
// primary's server id replaces the old one's in the domain). MySQL's is
// the set of every transaction executed (uuid:1-N), which exists only
// with gtid_mode=ON.
type gtids struct {
	maria map[uint32]gomysql.MariadbGTID // by domain
	mysql *gomysql.MysqlGTIDSet
}

// parseGTIDs reads a position's GTIDs for a server of flavor. known
// says whether s is the whole position ("": no transaction before it);
// when it is not, none are kept (nil).
func parseGTIDs(flavor, s string, known bool) (*gtids, error) {
	if !known {
		return nil, nil
	}
	if flavor == "mariadb" {
		g := &gtids{maria: map[uint32]gomysql.MariadbGTID{}}
		for _, part := range strings.Split(s, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			one, err := gomysql.ParseMariadbGTID(strings.TrimSpace(part))
			if err != nil {
				return nil, fmt.Errorf("the stored GTID position %q: %w", s, err)
			}
			g.maria[one.DomainID] = *one
		}
		return g, nil
	}
	if s == "" {
		return nil, nil // MySQL without gtid_mode
	}
	set, err := gomysql.ParseMysqlGTIDSet(s)
	if err != nil {
		return nil, fmt.Errorf("the stored GTID set %q: %w", s, err)
	}
	return &gtids{mysql: set.(*gomysql.MysqlGTIDSet)}, nil
}

// add counts a transaction's GTID event in; an anonymous one (MySQL
// without gtid_mode) is none.
func (g *gtids) add(ev *replication.BinlogEvent) {
	switch e := ev.Event.(type) {
	case *replication.MariadbGTIDEvent:
		// Read from the event's bytes, not e.GTID: in GTID mode go-mysql's
		// syncer keeps the first such event of each server in its own set
		// and moves it forward in place as later ones arrive, on its own
		// goroutine, so e.GTID may already name a later transaction.
		body := ev.RawData[min(len(ev.RawData), replication.EventHeaderSize):]
		if g.maria == nil || len(body) < 12 {
			return
		}
		domain := binary.LittleEndian.Uint32(body[8:12])
		g.maria[domain] = gomysql.MariadbGTID{DomainID: domain, ServerID: ev.Header.ServerID, SequenceNumber: binary.LittleEndian.Uint64(body[:8])}
	case *replication.GTIDEvent:
		if g.mysql == nil || len(e.SID) != 16 {
			return
		}
		if id, err := uuid.FromBytes(e.SID); err == nil && id != uuid.Nil {
			g.mysql.AddGTID(id, e.GNO)
		}
	}
}

// gtidOf is a transaction's GTID as the server writes it (MySQL
// "uuid:n", MariaDB "domain-server-sequence"), from its GTID event; ""
// for any other event. MariaDB's is read from the event's bytes, as add
// reads it (e.GTID may be moved on by the syncer's goroutine).
func gtidOf(ev *replication.BinlogEvent) string {
	switch e := ev.Event.(type) {
	case *replication.MariadbGTIDEvent:
		body := ev.RawData[min(len(ev.RawData), replication.EventHeaderSize):]
		if len(body) < 12 {
			return ""
		}
		return fmt.Sprintf("%d-%d-%d", binary.LittleEndian.Uint32(body[8:12]), ev.Header.ServerID, binary.LittleEndian.Uint64(body[:8]))
	case *replication.GTIDEvent:
		if id, err := uuid.FromBytes(e.SID); err == nil && id != uuid.Nil {
			return id.String() + ":" + strconv.FormatInt(e.GNO, 10)
		}
	}
	return ""
}

// String is the position as the server's own variables write it.
func (g *gtids) String() string {
	if g == nil {
		return ""
	}
	if g.maria != nil {
		var b strings.Builder
		for i, d := range slices.Sorted(maps.Keys(g.maria)) {
			one := g.maria[d]
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(uint64(one.DomainID), 10))
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(uint64(one.ServerID), 10))
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(one.SequenceNumber, 10))
		}
		return b.String()
	}
	return g.mysql.String()
}

// syncSet is the position for go-mysql's StartSyncGTID.
func (g *gtids) syncSet() (gomysql.GTIDSet, error) {
	if g.maria != nil {
		return gomysql.ParseMariadbGTIDSet(g.String())
	}
	return g.mysql.Clone(), nil
}

// gtidsAt reads the GTID position of a binary log file and offset on the
// server db is connected to: MariaDB computes it (BINLOG_GTID_POS; NULL
// when the file is not there: not known); MySQL's executed set is read
// with SHOW MASTER STATUS when the position is taken (executed), and a
// MySQL server without gtid_mode has none.
func gtidsAt(ctx context.Context, db *sql.DB, flavor, file string, pos uint32, executed string) (string, bool, error) {
	if flavor != "mariadb" {
		set := strings.ReplaceAll(strings.TrimSpace(executed), "\n", "")
		return set, set != "", nil
	}
	var s sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", file, pos).Scan(&s); err != nil {
		return "", false, fmt.Errorf("read the GTID position of %s:%d (BINLOG_GTID_POS): %w", file, pos, err)
	}
	return s.String, s.Valid, nil
}

// logStatus is what SHOW MASTER STATUS says: where the binary log ends
// now, MySQL's executed GTID set, and the databases the server keeps out
// of the log (binlog-do-db, binlog-ignore-db; comma-separated).
type logStatus struct {
	File           string
	Pos            uint32
	Executed       string
	DoDB, IgnoreDB string
}

// masterStatus reads SHOW MASTER STATUS, whatever columns the server
// version adds.
func masterStatus(ctx context.Context, db *sql.DB) (logStatus, error) {
	var st logStatus
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	var me *driver.MySQLError
	if errors.As(err, &me) && me.Number == 1064 {
		// MySQL 8.4 removed it for SHOW BINARY LOG STATUS (8.2 and
		// later); MariaDB keeps the old name.
		rows, err = db.QueryContext(ctx, "SHOW BINARY LOG STATUS")
	}
	if err != nil {
		return st, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return st, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return st, err
		}
		return st, fmt.Errorf("SHOW MASTER STATUS returned nothing: the binary log is off (log_bin)")
	}
	dest := make([]any, len(cols))
	var gtidSet, do, ignore sql.NullString
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "file":
			dest[i] = &st.File
		case "position":
			dest[i] = &st.Pos
		case "executed_gtid_set":
			dest[i] = &gtidSet
		case "binlog_do_db":
			dest[i] = &do
		case "binlog_ignore_db":
			dest[i] = &ignore
		default:
			dest[i] = new(sql.RawBytes)
		}
	}
	if err := rows.Scan(dest...); err != nil {
		return st, err
	}
	st.Executed, st.DoDB, st.IgnoreDB = gtidSet.String, do.String, ignore.String
	return st, rows.Err()
}

// logs says whether the binary log keeps the changes of a database's
// tables: the server logs a row change by its table's database, none
// outside binlog-do-db when it names any, none in binlog-ignore-db.
func (st logStatus) logs(database string) bool {
	in := func(list string) bool {
		for _, d := range strings.Split(list, ",") {
			if strings.TrimSpace(d) == database {
				return true
			}
		}
		return false
	}
	if strings.TrimSpace(st.DoDB) != "" && !in(st.DoDB) {
		return false
	}
	return !in(st.IgnoreDB)
}

// gtidsOf reads the GTID position of a binary log file and offset on the
// server cfg names (MariaDB; MySQL cannot say: not known).
func gtidsOf(ctx context.Context, cfg Config, flavor, file string, pos uint32) (string, bool, error) {
	if flavor != "mariadb" || file == "" {
		return "", false, nil
	}
	db, err := open(ctx, cfg)
	if err != nil {
		return "", false, err
	}
	defer db.Close()
	return gtidsAt(ctx, db, flavor, file, pos, "")
}

// flavorOf names a server's flavor from its version.
func flavorOf(version string) string {
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return "mariadb"
	}
	return "mysql"
}

// gtidTag is the first tag in a MySQL GTID set ("uuid:1-5:tag:1-3",
// MySQL 8.4's tagged GTIDs; a tag is a name, an interval starts with a
// digit), "" when it has none.
func gtidTag(set string) string {
	for _, uuidSet := range strings.Split(set, ",") {
		parts := strings.Split(strings.TrimSpace(uuidSet), ":")
		for _, p := range parts[min(1, len(parts)):] {
			if p = strings.TrimSpace(p); p != "" && (p[0] < '0' || p[0] > '9') {
				return strings.TrimSpace(parts[0]) + ":" + p
			}
		}
	}
	return ""
}

// taggedGTIDs says why a server whose executed set holds tagged GTIDs
// (uuid:tag) cannot feed a changefeed, and what to do: a position is
// the executed set, and neither it nor a tagged transaction can be read
// here (go-mysql parses no tags).
func taggedGTIDs(tag string) string {
	return fmt.Sprintf("the server's executed GTIDs include tagged ones (%s…, MySQL 8.4's gtid_next='AUTOMATIC:TAG' or 'UUID:TAG:N'), which a changefeed cannot read: its positions are the executed set, and a tagged transaction would stop it. Tags stay in gtid_executed until RESET BINARY LOGS AND GTIDS, and a replica given the server's GTIDs (gtid_purged) inherits them: feed the changefeed from a server whose GTID history has no tags, with every session writing GTIDs without tags (gtid_next AUTOMATIC)", tag)
}
