package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// XA transactions in the binary log. A prepared one is written at its
// XA PREPARE: its rows (MySQL after an XA START statement, MariaDB under
// a GTID flagged as a prepared XA), an XA END statement and an
// XA_PREPARE event; its XA COMMIT or XA ROLLBACK comes later, in a group
// of its own, maybe after other transactions. Read as an ordinary
// transaction at its XA END, a rolled-back one's rows reached the sink
// and stayed there, and a committed one's came before transactions that
// committed ahead of it. The reader keeps a prepared transaction's rows
// until its outcome and writes them at its XA COMMIT's position. A
// one-phase XA COMMIT (MySQL writes it after its XA END in the same
// group) is an ordinary transaction.

// mariadbPreparedXA is MariaDB's GTID event flag of a transaction that
// is an XA transaction's prepare (FL_PREPARED_XA).
const mariadbPreparedXA = 0x40

// xaStatement reads an XA statement: its verb (START, END, COMMIT,
// ROLLBACK, or "" for any other statement) and the transaction's id as
// written (X'…',X'…',n), without a trailing ONE PHASE.
func xaStatement(q string) (verb, xid string) {
	if len(q) < 3 || !strings.EqualFold(q[:3], "XA ") {
		return "", ""
	}
	verb, rest, _ := strings.Cut(strings.TrimSpace(q[3:]), " ")
	verb = strings.ToUpper(verb)
	switch verb {
	case "START", "BEGIN", "END", "COMMIT", "ROLLBACK":
	default:
		return "", ""
	}
	if verb == "BEGIN" {
		verb = "START"
	}
	rest = strings.TrimSpace(rest)
	if u := strings.ToUpper(rest); strings.HasSuffix(u, " ONE PHASE") {
		rest = strings.TrimSpace(rest[:len(rest)-len(" ONE PHASE")])
	}
	return verb, rest
}

// xaPrepared says why a changefeed cannot start while XA transactions
// are prepared: their rows were written to the binary log before the
// changefeed's first position, and their XA COMMIT after it brings
// nothing the reader could read. "" when none is (or the user may not
// ask: XA RECOVER needs XA_RECOVER_ADMIN on MySQL 8).
func xaPrepared(ctx context.Context, db *sql.DB) string {
	ids := xaRecover(ctx, db)
	if len(ids) == 0 {
		return ""
	}
	return fmt.Sprintf("%d XA transaction(s) prepared and not yet committed or rolled back (XA RECOVER lists them): their rows are in the binary log before the changefeed would start, and would not reach the sink when they commit; XA COMMIT or XA ROLLBACK them first", len(ids))
}

// xaWaiting is the changefeed status's warning while XA transactions
// are prepared on the server: the reader keeps no resume point while
// one it read waits for its outcome, so the changefeed's stays before
// its XA PREPARE — a restart reads from there again, and the binary
// logs from there must be kept. "" when none is.
func xaWaiting(ctx context.Context, db *sql.DB) string {
	ids := xaRecover(ctx, db)
	if len(ids) == 0 {
		return ""
	}
	return fmt.Sprintf("XA transaction(s) %s prepared and not yet committed or rolled back: until they are, the changefeed's resume point stays before their XA PREPARE (a restart reads from there again, and needs the binary logs from there); XA COMMIT or XA ROLLBACK them (XA RECOVER lists them)", strings.Join(ids, ", "))
}

// xaRecover lists the prepared XA transactions' ids (XA RECOVER's data,
// quoted); none when there are none or the user may not ask.
func xaRecover(ctx context.Context, db *sql.DB) []string {
	rows, err := db.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil
	}
	var ids []string
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if rows.Scan(ptrs...) != nil {
			return nil
		}
		id := fmt.Sprintf("#%d", len(ids)+1)
		for i, c := range cols {
			if strings.EqualFold(c, "data") {
				id = fmt.Sprintf("%q", vals[i])
			}
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil {
		return nil
	}
	return ids
}
