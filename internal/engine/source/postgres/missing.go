package postgres

// The values a column added with a DEFAULT gives the rows that existed
// before it (PostgreSQL keeps them apart, in attmissingval, until the
// table is rewritten): read from the catalog when a schema change adds
// columns, so that the sink's older rows get them too, or the table is
// held where they can no longer be told.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// missingValues are the values rows that existed before a column was
// added have in it (PostgreSQL's attmissingval: the constant DEFAULT of
// the ADD COLUMN), by column, for the columns to adds. A consumer that
// applies the change gives them to its older rows, as PostgreSQL did.
//
// unknown are the added columns whose older rows' value cannot be told:
// PostgreSQL no longer keeps it apart (a rewrite of the table since the
// ADD COLUMN, as ALTER COLUMN ... TYPE, VACUUM FULL or CLUSTER do, or a
// volatile DEFAULT), yet the column has a DEFAULT or is NOT NULL, so
// those rows may not be NULL in it. A column without either added
// without a kept value was added without a DEFAULT: NULL. A column
// dropped since is not asked about.
//
// A column is looked up by its number where it is known (nums): renamed
// since, it is the same column.
func (s *Stream) missingValues(ctx context.Context, rel uint32, to *source.TableDef, pair []int, nums []int16) (map[string]string, []string, error) {
	out := map[string]string{}
	var unknown []string
	for j, c := range to.Columns {
		if pair[j] >= 0 {
			continue
		}
		var (
			kept            *string
			notNull, hasDef bool
		)
		which, arg := "attname = $2", any(c.Name)
		if j < len(nums) && nums[j] != 0 {
			which, arg = "attnum = $2", nums[j]
		}
		err := s.cat.conn.QueryRow(ctx, `SELECT CASE WHEN atthasmissing THEN (attmissingval::text::text[])[1] END, attnotnull, atthasdef
			FROM pg_attribute WHERE attrelid = $1 AND `+which+` AND NOT attisdropped`, rel, arg).Scan(&kept, &notNull, &hasDef)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Dropped since: no row of it is ever sent with it.
		case err != nil:
			return nil, nil, fmt.Errorf("read column %s's values for older rows: %w", c.Name, err)
		case kept != nil:
			out[c.Name] = *kept
		case notNull || hasDef:
			if v, ok, err := s.leavesMissingValue(ctx, rel, c.Name); err != nil {
				return nil, nil, err
			} else if ok {
				out[c.Name] = v
				continue
			}
			unknown = append(unknown, c.Name)
		}
	}
	return out, unknown, nil
}

// leavesMissingValue is a partitioned table's value for older rows in an
// added column: PostgreSQL keeps it in each leaf partition, never in the
// root (it holds no rows), so asked of the root alone every ADD COLUMN
// with a DEFAULT held the table. ok only when the leaves that keep one
// agree; a root with none of them keeping one (each rewritten since, or
// an ordinary table) is not ok.
func (s *Stream) leavesMissingValue(ctx context.Context, rel uint32, col string) (string, bool, error) {
	rows, err := s.cat.conn.Query(ctx, `SELECT DISTINCT (a.attmissingval::text::text[])[1]
		FROM pg_partition_tree($1::oid::regclass) t JOIN pg_attribute a ON a.attrelid = t.relid
		WHERE t.isleaf AND t.relid::oid <> $1::oid AND a.attname = $2 AND NOT a.attisdropped AND a.atthasmissing`, rel, col)
	if err != nil {
		// (pg_partition_tree is PostgreSQL 12's: before it, no partitioned
		// table is replicated by its root, and the value is unknown.)
		return "", false, nil
	}
	defer rows.Close()
	var vals []string
	for rows.Next() {
		var v *string
		if err := rows.Scan(&v); err != nil {
			return "", false, err
		}
		if v != nil {
			vals = append(vals, *v)
		}
	}
	if err := rows.Err(); err != nil {
		return "", false, err
	}
	if len(vals) != 1 {
		return "", false, nil
	}
	return vals[0], true, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
