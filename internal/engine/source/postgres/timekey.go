package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// A key whose first column is a date or a timestamp (a time series keyed
// by (at, device), a fact table by (day, store)) is routed by its text,
// like any key that is not an integer, and a chunk in that order sorted
// the rest of its partition's range: a snapshot of such a table cost
// chunks × rows (200,000 rows keyed by (timestamptz, int4): 6 s, ten
// times an integer key's, and growing with the table's square). But
// PostgreSQL writes these types, in the ISO date style, as the year's
// four digits, then month, day, hours, minutes, seconds and a fraction
// without its trailing zeros (and a timestamptz's offset, +00 in UTC):
// for years 1 to 9999, text that sorts by its bytes exactly as the
// times do, and 'infinity' and '-infinity' sort after and before them
// as they do. So where, in a chunk's snapshot, the session writes them
// so (DateStyle ISO; a timestamptz's TimeZone a zone without offsets)
// and the table holds no value outside those years (two probes of the
// key's index, in the same snapshot as the read), the chunk reads the
// index in time order, bounded in time (timeCut), with the text bounds
// kept as the exact filter. Otherwise it sorts, as before.

// timeKind is the type a key column of a date or timestamp is cast to
// ("date", "timestamp", "timestamptz"); "" for any other type.
func timeKind(col source.ColumnDef) string {
	t := col.Type
	if i := strings.IndexByte(t, '('); i >= 0 {
		t = t[:i]
	}
	switch t {
	case "date", "timestamp", "timestamptz":
		return t
	}
	return ""
}

// timeLed says a table's key begins with a date or a timestamp.
func timeLed(def *source.TableDef) bool {
	keys := def.KeyNames()
	return len(keys) > 0 && timeKind(def.Columns[def.Index(keys[0])]) != ""
}

// utcZones are the names of TimeZone settings without offsets from UTC,
// as PostgreSQL's tz database spells them (lowercase): a timestamptz is
// written in them with +00, always.
var utcZones = []string{"utc", "etc/utc", "uct", "etc/uct", "universal", "etc/universal", "zulu", "etc/zulu",
	"gmt", "etc/gmt", "gmt0", "etc/gmt0", "gmt+0", "etc/gmt+0", "gmt-0", "etc/gmt-0", "greenwich", "etc/greenwich"}

// rowQuerier is a connection or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// timeOrdered says, in tx's snapshot, that the first column of table's key
// (a date or timestamp) is written as text in its own order: the date
// style ISO, for a timestamptz a TimeZone without offsets, and no value
// before year 1 or after 9999 (but the infinities). The probes are
// range reads of the key's index (its first column).
func timeOrdered(ctx context.Context, tx rowQuerier, table string, def *source.TableDef) (bool, error) {
	col := def.Columns[def.Index(def.KeyNames()[0])]
	name := pgx.Identifier{col.Name}.Sanitize()
	t, err := fromTable(ctx, tx, table)
	if err != nil {
		return false, err
	}
	zone := "true"
	if timeKind(col) == "timestamptz" {
		zone = "lower(current_setting('TimeZone')) = ANY($1)"
	}
	q := fmt.Sprintf(`SELECT current_setting('DateStyle') LIKE 'ISO%%' AND %s
	AND NOT EXISTS (SELECT FROM %s WHERE %s > '-infinity' AND %s < '0001-01-01')
	AND NOT EXISTS (SELECT FROM %s WHERE %s >= '10000-01-01' AND %s < 'infinity')`, zone, t, name, name, t, name, name)
	var args []any
	if zone != "true" {
		args = append(args, utcZones)
	}
	var ok bool
	err = tx.QueryRow(ctx, q, args...).Scan(&ok)
	return ok, err
}

// timeCut is how a bound value bounds a time column of kind whose values
// are written in their own order (timeOrdered): a value's own text
// (timeText) exactly; any other by the year its digits begin: a
// value whose text is at or above v has a year at or above what v's first
// digits say, and one whose text is below it a year at or below it (its
// text begins with its year's four digits). A value that begins with no
// digit is below every year's text (only '-infinity' may be below it) or
// above them (only 'infinity' may be at or above it).
func timeCut(kind, v string) cut {
	if timeText(kind, v) {
		return cut{exact: true}
	}
	m := 0
	for m < len(v) && m < 4 && v[m] >= '0' && v[m] <= '9' {
		m++
	}
	switch {
	case m == 0 && (v == "" || v[0] < '0'):
		return cut{}
	case m == 0 && v <= "infinity":
		return cut{lower: "infinity", hasLower: true}
	case m == 0:
		return cut{none: true}
	}
	d, _ := strconv.Atoi(v[:m])
	scale := 1
	for range 4 - m {
		scale *= 10
	}
	c := cut{lower: fmt.Sprintf("%04d-01-01", max(d*scale, 1)), hasLower: true, upper: "infinity", hasUpper: true}
	if next := (d + 1) * scale; next <= 9999 {
		c.upper = fmt.Sprintf("%04d-01-01", next)
	}
	return c
}

// timeText says v is the text PostgreSQL writes for a value of kind in
// the ISO style (a timestamptz's in UTC), of a year from 1 to 9999, or
// an infinity.
func timeText(kind, v string) bool {
	if v == "infinity" || v == "-infinity" {
		return true
	}
	layout := "2006-01-02 15:04:05.999999"
	switch kind {
	case "date":
		layout = "2006-01-02"
	case "timestamptz":
		var ok bool
		if v, ok = strings.CutSuffix(v, "+00"); !ok {
			return false
		}
	}
	t, err := time.Parse(layout, v)
	return err == nil && t.Year() >= 1 && t.Format(layout) == v
}
