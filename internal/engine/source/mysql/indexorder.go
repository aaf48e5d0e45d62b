package mysql

// A key whose index does not order it by its bytes (a character column:
// its collation folds case and pads spaces, 'B' before 'a'; a BIGINT
// UNSIGNED, whose keys route as their digits) is copied in its index's
// order: each chunk reads the next rows after the last one read, a range
// of the primary key, and keeps those of its partition's span (routing
// is by the keys' bytes, which the database cannot compare in the
// index). A chunk of a byte range cast every key and sorted the rest of
// the table, every chunk: on a table of tens of millions of rows each
// took minutes, past the chunk's timeout, and the copy never ended. Each
// partition reads the table in its index's order instead, the rows whose
// first column is in its span's range of it: where the key's first
// column is a BIGINT UNSIGNED, the ranges of its values (unsigned.go);
// an integer, or characters, a DECIMAL, a date or a time by their text,
// between the span's first values (firstbound.go); any other, the whole
// table (a table starts as one partition).

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// keyKind is how a key column is bounded in its index's order.
type keyKind int

const (
	kindOther    keyKind = iota // not bounded in index order here
	kindInt                     // a signed integer: its value
	kindBytes                   // BINARY, VARBINARY: its bytes
	kindChars                   // CHAR, VARCHAR: its text, in its collation
	kindUnsigned                // BIGINT UNSIGNED: its value
	kindNumber                  // DECIMAL, NUMERIC, YEAR: its value
	kindTemporal                // DATE, DATETIME, TIMESTAMP, TIME: its text
)

func keyKindOf(colType string) keyKind {
	t := strings.ToLower(colType)
	base, _, _ := strings.Cut(t, "(")
	base, _, _ = strings.Cut(base, " ")
	switch {
	case keyType(colType) == "int8":
		return kindInt
	case bytesKey(t):
		return kindBytes
	case base == "char" || base == "varchar":
		return kindChars
	case base == "bigint" && strings.Contains(t, "unsigned"):
		return kindUnsigned
	case base == "decimal" || base == "numeric" || base == "year":
		return kindNumber
	case base == "date" || base == "datetime" || base == "timestamp" || base == "time":
		return kindTemporal
	}
	return kindOther
}

// indexOrdered says a table's key is copied in its index's order: a
// column of it is not ordered by its bytes there, and each can be
// bounded by a literal the index compares as it orders. A DECIMAL's text
// is not in its order ("10" before "9"); a temporal key's text is, but a
// span's bounds (an operator's split key, "2024-06") need not be a value
// the server reads as one, where the cursor always is a row's own. Keys
// with an ENUM, SET, FLOAT, DOUBLE, BIT or a prefix of a TEXT column stay
// on the byte ranges (sorted): their text is not exactly the value the
// index compares, or not in its order.
func indexOrdered(def *source.TableDef) bool {
	names := def.KeyNames()
	some := false
	for _, k := range names {
		switch keyKindOf(def.Columns[def.Index(k)].Type) {
		case kindOther:
			return false
		case kindChars, kindUnsigned, kindNumber, kindTemporal:
			some = true
		}
	}
	return some
}

// keyCollation is a character key column's set and collation.
type keyCollation struct{ charset, collation string }

// keyCollations reads the character sets and collations of a table's
// character key columns.
func keyCollations(ctx context.Context, conn *sql.Conn, table string) (map[string]keyCollation, error) {
	schema, name := model.SplitTableName(table)
	rows, err := conn.QueryContext(ctx, `SELECT COLUMN_NAME, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_KEY = 'PRI' AND COLLATION_NAME IS NOT NULL`, schema, name)
	if err != nil {
		return nil, fmt.Errorf("read the collations of %s's key: %w", table, err)
	}
	defer rows.Close()
	out := map[string]keyCollation{}
	for rows.Next() {
		var col string
		var kc keyCollation
		if err := rows.Scan(&col, &kc.charset, &kc.collation); err != nil {
			return nil, err
		}
		out[col] = kc
	}
	return out, rows.Err()
}

// orderOf names the index order of a table's key: its columns with
// their types and the collations of the character ones, "(sku
// varchar(20) utf8mb4_general_ci, line int)". A cursor read in another
// order means nothing in this one: a collation changed, or a type (a
// DATETIME cursor against a column made DATE compares as neither equal
// nor less, and that day's rows would be skipped).
func orderOf(def *source.TableDef, colls map[string]keyCollation) string {
	var parts []string
	for _, k := range def.KeyNames() {
		part := k + " " + strings.ToLower(def.Columns[def.Index(k)].Type)
		if kc, ok := colls[k]; ok {
			part += " " + kc.collation
		}
		parts = append(parts, part)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// orderedQuery is the SELECT of a chunk in the key's index order: the
// next rows after cursor (an encoded key of span.Key's types; none at
// the copy's start), limit of them. The bound is the key's row order
// written out (a > x OR a = x AND b > y), which the range optimizer
// reads as ranges of the index, and each value is a literal in its
// column's own character set and collation: a literal of another set
// makes the server convert the column, and scan.
func orderedQuery(def *source.TableDef, span model.Span, cursor string, limit int, colls map[string]keyCollation) (string, error) {
	return indexQuery(def, span, cursor, "", limit, "", colls)
}

// indexQuery is boundedQuery with the span's first values bounded.
func indexQuery(def *source.TableDef, span model.Span, cursor, horizon string, limit int, dir string, colls map[string]keyCollation) (string, error) {
	return boundedQuery(def, span, cursor, horizon, limit, dir, colls, true)
}

// boundedQuery is orderedQuery bounded at the copy's horizon too (its
// last row in the index's order when it began,
// model.CopyProgress.Horizon; none: ""), in direction dir ("" or "
// DESC"). A key whose first column is a BIGINT UNSIGNED is read in its
// span's ranges of values only (unsigned.go); with first, one whose
// first column firstbound.go bounds, where its first values are the
// span's; any other, in the whole table.
func boundedQuery(def *source.TableDef, span model.Span, cursor, horizon string, limit int, dir string, colls map[string]keyCollation, first bool) (string, error) {
	keys := def.KeyNames()
	order := make([]string, len(keys))
	for i, k := range keys {
		order[i] = quoteIdent(k)
	}
	var conds []string
	within, err := unsignedBound(def, span, order[0])
	if err != nil {
		return "", fmt.Errorf("snapshot of %s: the partition's range: %w", span.Table, err)
	}
	if within != "" {
		conds = append(conds, within)
	}
	if within := firstColumnBound(def, span, order[0]); first && within != "" {
		conds = append(conds, within)
	}
	for _, b := range []struct{ key, what, op string }{{cursor, "cursor", ">"}, {horizon, "horizon", "<"}} {
		if b.key == "" {
			continue
		}
		vals, err := model.DecodeKeyValues(span.Key, b.key)
		if err != nil || len(vals) != len(keys) {
			return "", fmt.Errorf("snapshot of %s: the copy's %s is not a key of (%s): %v", span.Table, b.what, strings.Join(keys, ", "), err)
		}
		lits := make([]string, len(keys))
		for i, k := range keys {
			if lits[i], err = orderedLiteral(def.Columns[def.Index(k)].Type, colls[k], vals[i]); err != nil {
				return "", fmt.Errorf("snapshot of %s: %w", span.Table, err)
			}
		}
		// The key's row order written out: after the cursor (a > x OR a =
		// x AND b > y), at or before the horizon (the same with <, or
		// every column equal).
		var or []string
		for i := range keys {
			var and []string
			for j := 0; j < i; j++ {
				and = append(and, order[j]+" = "+lits[j])
			}
			and = append(and, order[i]+" "+b.op+" "+lits[i])
			or = append(or, "("+strings.Join(and, " AND ")+")")
		}
		if b.op == "<" {
			var and []string
			for i := range keys {
				and = append(and, order[i]+" = "+lits[i])
			}
			or = append(or, "("+strings.Join(and, " AND ")+")")
		}
		conds = append(conds, "("+strings.Join(or, " OR ")+")")
	}
	q := fmt.Sprintf("SELECT %s FROM %s", selectList(def), quoteTable(span.Table))
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	return q + source.OrderBy(order, dir, limit), nil
}

// orderedLiteral writes a key value as its column compares it in the
// index: a number as a number, bytes as a hexadecimal literal, text as
// UTF-8 bytes converted to the column's set under its collation.
func orderedLiteral(colType string, kc keyCollation, v string) (string, error) {
	switch keyKindOf(colType) {
	case kindInt:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", fmt.Errorf("key %q is not an integer", v)
		}
		return strconv.FormatInt(n, 10), nil
	case kindUnsigned:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return "", fmt.Errorf("key %q is not an unsigned integer", v)
		}
		return strconv.FormatUint(n, 10), nil
	case kindNumber:
		// The value's own text (DECIMAL's is exact), as a number.
		if !numberText(v) {
			return "", fmt.Errorf("key %q is not a number", v)
		}
		return v, nil
	case kindTemporal:
		// A quoted constant, which the server converts to the column's
		// type before comparing (zero dates too); a TIMESTAMP's in the
		// session's zone, UTC, the one its text was read in.
		if !temporalText(v) {
			return "", fmt.Errorf("key %q is not a date or a time", v)
		}
		return "'" + v + "'", nil
	case kindChars:
		if kc.charset == "" || kc.collation == "" {
			return "", fmt.Errorf("the collation of a character key column (%s) is not known", colType)
		}
		return fmt.Sprintf("CONVERT(_utf8mb4 X'%s' USING %s) COLLATE %s", hex.EncodeToString([]byte(v)), kc.charset, kc.collation), nil
	}
	return "X'" + hex.EncodeToString([]byte(v)) + "'", nil
}

// numberText says v is a decimal number as the server writes one:
// digits, at most one point, a sign in front.
func numberText(v string) bool {
	v = strings.TrimPrefix(v, "-")
	whole, frac, _ := strings.Cut(v, ".")
	return whole != "" && allIn(whole, "0123456789") && allIn(frac, "0123456789")
}

// temporalText says v is a date, a time or both as the server writes
// them: digits and the separators, nothing a quote could end.
func temporalText(v string) bool {
	return v != "" && allIn(v, "0123456789-:. ")
}

func allIn(s, chars string) bool {
	for _, r := range s {
		if !strings.ContainsRune(chars, r) {
			return false
		}
	}
	return true
}

// temporalKey says a table's key has a date or time column.
func temporalKey(def *source.TableDef) bool {
	for _, k := range def.KeyNames() {
		if keyKindOf(def.Columns[def.Index(k)].Type) == kindTemporal {
			return true
		}
	}
	return false
}

// allowZeroDates takes NO_ZERO_DATE and NO_ZERO_IN_DATE out of the
// session's sql_mode: a chunk of a key with a date may start after a
// zero date ('0000-00-00', '2024-00-15'), a row's own value, and a
// server with them (MySQL 8's default) may refuse comparing with one,
// which would stop the copy at that row for ever.
func allowZeroDates(ctx context.Context, conn *sql.Conn) error {
	var mode string
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read the session's sql_mode: %w", err)
	}
	if !strings.Contains(mode, "NO_ZERO") {
		return nil
	}
	var kept []string
	for _, m := range strings.Split(mode, ",") {
		if m != "NO_ZERO_DATE" && m != "NO_ZERO_IN_DATE" {
			kept = append(kept, m)
		}
	}
	set := strings.Join(kept, ",")
	if !allIn(set, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_,") {
		return fmt.Errorf("the session's sql_mode %q is not a list of modes", mode)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_mode = '"+set+"'"); err != nil {
		return fmt.Errorf("take NO_ZERO_DATE out of the session's sql_mode: %w", err)
	}
	return nil
}
