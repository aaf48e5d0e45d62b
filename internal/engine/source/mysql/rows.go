package mysql

// A rows event's rows as row changes: values in the server's text form
// (values.go), keys encoded for routing.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// imageLacks says why a rows event's rows cannot be replicated when an
// image of one leaves columns out, "" when none does: the session that
// wrote it had binlog_row_image MINIMAL or NOBLOB (set after the
// preflight, or for that session only), and go-mysql gives a column left
// out as nil, which would reach the sink as NULL (an update's unchanged
// text, an insert's unnamed columns) or route by a missing key.
func imageLacks(e *replication.RowsEvent, def *source.TableDef) string {
	for _, skipped := range e.SkippedColumns {
		if len(skipped) == 0 {
			continue
		}
		var names []string
		for _, i := range skipped {
			if i < len(def.Columns) {
				names = append(names, def.Columns[i].Name)
			}
		}
		return fmt.Sprintf("a row was logged without its columns %s: the session that wrote it had binlog_row_image MINIMAL or NOBLOB, not FULL, and the sink would have them as NULL. Make every session log whole rows (SET GLOBAL binlog_row_image = FULL, binlog-row-image=FULL in the server's configuration, then reconnect the application's connections, which keep the value they began with)",
			strings.Join(names, ", "))
	}
	return ""
}

// rowEvents turns a rows event of a replicated table into row changes,
// appended to dst (the transaction's so far).
func rowEvents(dst []source.Event, e *replication.RowsEvent, typ replication.EventType, table string, st tableState, cols []column, keyTypes string) ([]source.Event, error) {
	def := st.Def
	if int(e.ColumnCount) != len(def.Columns) {
		return nil, fmt.Errorf("the binary log has %d columns of %s, its schema %d", e.ColumnCount, table, len(def.Columns))
	}
	// The images' values are cut from one slice for the whole event, at
	// capacity, not allocated row by row.
	var slab []source.Value
	image := func(r []any) ([]source.Value, error) {
		if len(slab) < len(r) {
			slab = make([]source.Value, len(r)*len(e.Rows))
		}
		out := slab[:len(r):len(r)]
		slab = slab[len(r):]
		for i, v := range r {
			var err error
			if out[i], err = cols[i].text(v); err != nil {
				return nil, fmt.Errorf("column %s of %s: %w", def.Columns[i].Name, table, err)
			}
		}
		return out, nil
	}
	keys := keyIndexes(def)
	// Keys are routed encoded (model.EncodeKeyValues), as partitions'
	// bounds are.
	var keyErr error
	keyOf := func(vals []source.Value) string {
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = vals[k].Text
		}
		k, err := model.EncodeKeyValues(keyTypes, parts)
		if err != nil && keyErr == nil {
			keyErr = fmt.Errorf("the key of a row of %s: %w", table, err)
		}
		return k
	}
	// Into the transaction's rows, doubling: append grows a slice of
	// more than 256 by a quarter, and a transaction of thousands of rows
	// was copied two or three times over as it grew.
	out := dst
	if need := len(dst) + len(e.Rows); need > cap(dst) {
		out = append(make([]source.Event, 0, max(need, 2*cap(dst))), dst...)
	}
	base := source.Event{Kind: source.KindDML, Table: table, Def: def, SchemaVersion: st.Version, TableVersion: st.Since}
	if typ == replication.PARTIAL_UPDATE_ROWS_EVENT {
		// MySQL's binlog_row_value_options=PARTIAL_JSON, set after the
		// changefeed's preflight: the update's JSON values are diffs.
		return nil, errors.New(partialJSON)
	}
	switch rowsOp(typ) {
	case source.OpInsert:
		for _, r := range e.Rows {
			vals, err := image(r)
			if err != nil {
				return nil, err
			}
			ev := base
			ev.Op, ev.New, ev.Key = source.OpInsert, vals, keyOf(vals)
			out = append(out, ev)
		}
	case source.OpDelete:
		for _, r := range e.Rows {
			vals, err := image(r)
			if err != nil {
				return nil, err
			}
			ev := base
			ev.Op, ev.Old, ev.Key = source.OpDelete, vals, keyOf(vals)
			out = append(out, ev)
		}
	case source.OpUpdate:
		for i := 0; i+1 < len(e.Rows); i += 2 {
			before, err := image(e.Rows[i])
			if err != nil {
				return nil, err
			}
			after, err := image(e.Rows[i+1])
			if err != nil {
				return nil, err
			}
			if oldKey, newKey := keyOf(before), keyOf(after); oldKey != newKey {
				// A key change: the old key's row goes, the new key's
				// comes (each routed by its own key).
				del, ins := base, base
				del.Op, del.Old, del.Key = source.OpDelete, before, oldKey
				ins.Op, ins.New, ins.Key = source.OpInsert, after, newKey
				out = append(out, del, ins)
				continue
			}
			ev := base
			ev.Op, ev.Old, ev.New, ev.Key = source.OpUpdate, before, after, keyOf(after)
			out = append(out, ev)
		}
	default:
		return nil, fmt.Errorf("a rows event of type %s is not decoded", typ)
	}
	if keyErr != nil {
		return nil, keyErr
	}
	return out, nil
}

// rowsOp is what a rows event of type t does (0: none this reader
// knows). MariaDB's log_bin_compress gives compressed rows events types
// of their own; go-mysql decompresses them.
func rowsOp(t replication.EventType) source.Op {
	switch t {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
		replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		return source.OpInsert
	case replication.UPDATE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2,
		replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1:
		return source.OpUpdate
	case replication.DELETE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2,
		replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1:
		return source.OpDelete
	}
	return 0
}

// isInsert says whether a rows event inserts.
func isInsert(t replication.EventType) bool { return rowsOp(t) == source.OpInsert }

// keyIndexes are the primary key's column indexes in key order.
func keyIndexes(def *source.TableDef) []int {
	var out []int
	for _, n := range def.KeyNames() {
		out = append(out, def.Index(n))
	}
	return out
}
