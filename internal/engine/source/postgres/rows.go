package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// TableReader reads upstream tables whole, in PostgreSQL's text form, for
// verify: rows by primary key (key columns' text joined by commas, as
// sinks key them; model.ImageKey for a table without one), column name
// to text, nil for NULL.
type TableReader struct {
	ConnString string
}

// NewTableReader reads the upstream a source URI names.
func NewTableReader(uri string) (*TableReader, error) {
	cfg, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	return &TableReader{ConnString: cfg.ConnString}, nil
}

// Snapshot reads tables whole in one REPEATABLE READ transaction (one
// consistent point) and returns the server's clock at that point. The
// simple protocol returns every value in its text form, as pgoutput
// sends it.
func (r *TableReader) Snapshot(ctx context.Context, tables []string) (time.Time, map[string]map[string]map[string]*string, error) {
	pc, err := pgx.ParseConfig(r.ConnString)
	if err != nil {
		return time.Time{}, nil, err
	}
	pc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg := Config{ConnString: r.ConnString}
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return time.Time{}, nil, explain(cfg, err)
	}
	defer conn.Close(context.Background())
	if err := unlimit(ctx, conn); err != nil { // a large table's read is one transaction
		return time.Time{}, nil, explain(cfg, err)
	}
	cat := &catalog{conn: conn, types: map[uint32]string{}}
	defs := map[string]*source.TableDef{}
	for _, t := range tables {
		def, err := cat.tableDef(ctx, t)
		if err != nil {
			return time.Time{}, nil, err
		}
		defs[t] = def
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return time.Time{}, nil, explain(cfg, err)
	}
	defer tx.Rollback(context.Background())
	// The first statement takes the snapshot; the clock is read after it.
	var at time.Time
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
		return time.Time{}, nil, explain(cfg, err)
	}
	out := map[string]map[string]map[string]*string{}
	for _, t := range tables {
		rows, err := readRows(ctx, tx, t, defs[t])
		if err != nil {
			return time.Time{}, nil, err
		}
		out[t] = rows
	}
	return at, out, nil
}

// readRows reads a table's replicated columns (not its generated ones,
// which the sink never has).
func readRows(ctx context.Context, tx pgx.Tx, table string, def *source.TableDef) (map[string]map[string]*string, error) {
	keys := def.KeyNames()
	from, err := fromTable(ctx, tx, table)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, "SELECT "+columnList(def)+" FROM "+from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[string]*string{}
	copies := map[string]int{}
	fields := rows.FieldDescriptions()
	for rows.Next() {
		raw := rows.RawValues()
		row := make(map[string]*string, len(raw))
		for i, v := range raw {
			if v != nil {
				s := string(v)
				row[fields[i].Name] = &s
			} else {
				row[fields[i].Name] = nil
			}
		}
		if len(keys) == 0 {
			// No primary key: rows are told apart by their whole image.
			img := model.ImageKey(row, 0)
			copies[img]++
			out[model.ImageKey(row, copies[img])] = row
			continue
		}
		parts := make([]string, len(keys))
		for i, k := range keys {
			if row[k] == nil {
				return nil, fmt.Errorf("%s: a row has a NULL key column %s", table, k)
			}
			parts[i] = *row[k]
		}
		out[model.JoinKeyTexts(parts)] = row
	}
	return out, rows.Err()
}
