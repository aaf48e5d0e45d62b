package mysql

// Where a new changefeed cuts a table into partitions (Boundaries).

import (
	"context"
	"database/sql"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// boundarySample bounds the keys Boundaries reads of a table: a larger
// one is cut by its key's values, or by reading one key at each
// quantile.
const boundarySample = 100_000

// sparseKeys bounds, for a table keyed by one integer column, how many
// values of the key's range there may be per row for the range to be cut
// evenly by value: an auto-increment key with the gaps of deleted rows
// and failed inserts is well under it; a key of a few outliers far away
// (a snowflake id, a sentinel) over it, and read at its quantiles.
const sparseKeys = 100

// Boundaries implements source.Source: n-1 keys that cut the table's
// rows into n ranges of about the same number of rows (an empty table,
// or one with fewer keys, is cut less or not at all), in routing order
// (keyOrder). A small table's keys are all read. A larger one keyed by
// one integer column is cut evenly between its smallest and its largest
// key, which the server reads from the ends of its index: a new
// changefeed of a table of a billion rows does not read them (a COUNT(*)
// and the walks to each quantile took 0.18 s at a million rows, and grow
// with the table). Any other larger table's quantiles are each read at
// their offset (the server walks the key; nothing but the n-1 keys comes
// back), then put in routing order.
func (s *Source) Boundaries(ctx context.Context, table string, n int) ([]string, error) {
	if n < 2 {
		return nil, nil
	}
	db, err := open(ctx, s.cfg)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	def, _, err := tableDef(ctx, db, table)
	if err != nil {
		return nil, err
	}
	keys := def.KeyNames()
	if len(keys) == 0 {
		return nil, nil
	}
	cols := make([]string, len(keys))
	for i, k := range keys {
		cols[i] = quoteIdent(k)
	}
	order := keyOrder(def)
	if indexOrdered(def) {
		// In the key's index order (indexorder.go), which the server
		// walks without sorting: a key cast to its bytes was sorted, the
		// whole table for each quantile. The keys are put in their bytes'
		// order here; the ranges they cut are then about even, not
		// exactly.
		order = cols
	}
	q := fmt.Sprintf("SELECT %s FROM %s ORDER BY %s", strings.Join(cols, ", "), quoteTable(table), strings.Join(order, ", "))
	types := keyTypes(def)
	read := func(q string) ([]string, error) {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return nil, explain(s.cfg, err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			vals := make([]sql.NullString, len(keys))
			ptrs := make([]any, len(keys))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return nil, err
			}
			texts := make([]string, len(keys))
			for i, v := range vals {
				texts[i] = v.String
			}
			enc, err := model.EncodeKeyValues(types, texts)
			if err != nil {
				return nil, err
			}
			out = append(out, enc)
		}
		if err := rows.Err(); err != nil {
			return nil, explain(s.cfg, err)
		}
		return out, nil
	}
	// The server's estimate of the table's rows (InnoDB's statistics;
	// stale, or 0, after a bulk load): a table it says is small is read
	// to at most boundarySample keys, and is larger when they all come.
	var estimate int64
	schema, name := model.SplitTableName(table)
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(TABLE_ROWS), 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
		schema, name).Scan(&estimate); err != nil {
		return nil, explain(s.cfg, err)
	}
	if estimate <= boundarySample {
		all, err := read(fmt.Sprintf("%s LIMIT %d", q, boundarySample+1))
		if err != nil {
			return nil, err
		}
		if len(all) <= boundarySample {
			return source.Quantiles(all, n), nil
		}
		// Its statistics are stale (MySQL 8 caches them for a day): how
		// many rows it has is not known, and only the ranges' own
		// estimates say whether they are even (balanced).
		estimate = 0
	}
	if types == "int8" {
		cuts, ok, err := s.cutByValue(ctx, db, table, cols[0], estimate, n)
		if err != nil || ok {
			return cuts, err
		}
	}
	var count int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoteTable(table)).Scan(&count); err != nil {
		return nil, explain(s.cfg, err)
	}
	var out []string
	for i := 1; i < n; i++ {
		k, err := read(fmt.Sprintf("%s LIMIT 1 OFFSET %d", q, int64(i)*count/int64(n)))
		if err != nil {
			return nil, err
		}
		if len(k) == 1 && k[0] != "" {
			out = append(out, k[0])
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// cutByValue cuts a table keyed by one integer column (col) of about
// rows rows into n ranges of its key's values between its smallest and
// its largest: false when the key's values are too sparse for that to
// cut even ranges (sparseKeys), or the ranges it would cut are not
// (balanced).
func (s *Source) cutByValue(ctx context.Context, db *sql.DB, table, col string, rows int64, n int) ([]string, bool, error) {
	var lo, hi sql.NullString
	if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT MIN(%s), MAX(%s) FROM %s", col, col, quoteTable(table))).Scan(&lo, &hi); err != nil {
		return nil, false, explain(s.cfg, err)
	}
	cuts, ok := evenCuts(lo.String, hi.String, rows, n)
	if !ok || len(cuts) == 0 {
		return cuts, ok, nil
	}
	ok, err := s.balanced(ctx, db, table, col, lo.String, hi.String, cuts, max(rows, boundarySample+1))
	if err != nil {
		// (MySQL 8 answers EXPLAIN in the format its explain_format says,
		// which FORMAT=TRADITIONAL overrides; whatever else goes wrong
		// here only costs the slower cut.)
		s.log.Warn("mysql source: the server's estimates of a table's ranges could not be read; it is cut at its keys' quantiles, read at their offsets", "changefeed", s.cf, "table", table, "err", err)
		return cuts, false, nil
	}
	return cuts, ok, nil
}

// balanced says the ranges cuts make of the keys lo to hi hold about as
// many rows each, by the server's estimates of each range (EXPLAIN: a few
// dives into the key's index, no rows read): a key of a few outliers far
// above the rest (a sentinel id) is dense enough on average, yet puts
// nearly every row in the first range. Each range must hold at least a
// quarter of its share; and all of them at least half the rows the table
// is known to hold (atLeast): estimates far under it come from the
// server's own statistics, stale, and say nothing.
func (s *Source) balanced(ctx context.Context, db *sql.DB, table, col, lo, hi string, cuts []string, atLeast int64) (bool, error) {
	at := []string{lo}
	for _, c := range cuts {
		at = append(at, model.DecodeKey("int8", c))
	}
	var version string
	if err := db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		return false, err
	}
	verb := "EXPLAIN"
	if flavorOf(version) == "mysql" {
		verb = "EXPLAIN FORMAT=TRADITIONAL" // whatever explain_format says (MySQL 8.0.32 on)
	}
	var est []int64
	var sum int64
	for i := range at {
		cond := fmt.Sprintf("%s >= %s AND %s <= %s", col, at[i], col, hi)
		if i+1 < len(at) {
			cond = fmt.Sprintf("%s >= %s AND %s < %s", col, at[i], col, at[i+1])
		}
		n, err := explainedRows(ctx, db, fmt.Sprintf("%s SELECT %s FROM %s WHERE %s", verb, col, quoteTable(table), cond))
		if err != nil {
			return false, err
		}
		est, sum = append(est, n), sum+n
	}
	if 2*sum < atLeast {
		return false, nil
	}
	for _, n := range est {
		if 4*n*int64(len(est)) < sum {
			return false, nil
		}
	}
	return true, nil
}

// explainedRows is the rows the server estimates a query reads, summed
// over its plan's lines (EXPLAIN's rows column, in MySQL's and MariaDB's
// output alike).
func explainedRows(ctx context.Context, db *sql.DB, q string) (int64, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	at := slices.IndexFunc(cols, func(c string) bool { return strings.EqualFold(c, "rows") })
	if at < 0 {
		return 0, fmt.Errorf("EXPLAIN gave no rows column (%s)", strings.Join(cols, ", "))
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var sum int64
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		if n, err := strconv.ParseInt(string(vals[at]), 10, 64); err == nil {
			sum += n
		}
	}
	return sum, rows.Err()
}

// evenCuts are the n-1 keys that cut the integers lo to hi (text) into n
// ranges of about the same width, encoded as int8 keys; false when the
// range holds more than sparseKeys values per row of rows (0: rows not
// known), or is not one.
func evenCuts(lo, hi string, rows int64, n int) ([]string, bool) {
	first, ok1 := new(big.Int).SetString(lo, 10)
	last, ok2 := new(big.Int).SetString(hi, 10)
	if !ok1 || !ok2 || last.Cmp(first) < 0 {
		return nil, false
	}
	width := new(big.Int).Sub(last, first)
	width.Add(width, big.NewInt(1))
	if rows > 0 && width.Cmp(new(big.Int).Mul(big.NewInt(rows), big.NewInt(sparseKeys))) > 0 {
		return nil, false
	}
	var out []string
	for i := 1; i < n; i++ {
		at := new(big.Int).Mul(width, big.NewInt(int64(i)))
		at.Quo(at, big.NewInt(int64(n)))
		at.Add(at, first)
		if at.Cmp(first) <= 0 {
			continue // a range narrower than n keys: fewer cuts
		}
		enc, err := model.EncodeKeyValues("int8", []string{at.String()})
		if err != nil {
			return nil, false
		}
		out = append(out, enc)
	}
	return slices.Compact(out), true
}
