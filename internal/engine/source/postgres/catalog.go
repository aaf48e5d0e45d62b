package postgres

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// catalog reads table definitions and type names from the upstream's
// system catalogs over an ordinary (not replication) connection.
type catalog struct {
	conn *pgx.Conn

	mu      sync.Mutex
	types   map[uint32]string // type oid -> typname
	version int               // server_version_num, once read
}

// serverVersion is the server's server_version_num.
func (c *catalog) serverVersion(ctx context.Context) (int, error) {
	c.mu.Lock()
	v := c.version
	c.mu.Unlock()
	if v != 0 {
		return v, nil
	}
	// The server says its version when the connection starts: a
	// snapshot's chunk, whose catalog is new, need not ask it again.
	if v, ok := versionNum(c.conn.PgConn().ParameterStatus("server_version")); ok {
		c.mu.Lock()
		c.version = v
		c.mu.Unlock()
		return v, nil
	}
	if err := c.conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.version = v
	c.mu.Unlock()
	return v, nil
}

// versionNum is server_version_num of a server_version as the server
// reports it ("15.4", "15.4 (Debian 15.4-1.pgdg120+1)", "17devel",
// "16beta2", "9.6.24"); false where it is none of these.
func versionNum(s string) (int, bool) {
	nums := make([]int, 0, 3)
	n, digits := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if digits++; digits > 6 {
				return 0, false
			}
			n = n*10 + int(s[i]-'0')
			continue
		}
		if digits == 0 {
			break
		}
		nums = append(nums, n)
		n, digits = 0, 0
		if i == len(s) || s[i] != '.' || len(nums) == 3 {
			break
		}
	}
	switch {
	case len(nums) == 0 || nums[0] == 0:
		return 0, false
	case nums[0] >= 10: // 10 on: major.minor
		minor := 0
		if len(nums) > 1 {
			minor = nums[1]
		}
		return nums[0]*10000 + minor, minor < 10000
	case len(nums) == 3: // 9.6.24
		return nums[0]*10000 + nums[1]*100 + nums[2], nums[1] < 100 && nums[2] < 100
	}
	return 0, false
}

func openCatalog(ctx context.Context, connString string) (*catalog, error) {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return nil, err
	}
	if err := unlimit(ctx, conn); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return &catalog{conn: conn, types: map[uint32]string{}}, nil
}

func (c *catalog) Close() { _ = c.conn.Close(context.Background()) }

// typeName is the catalog name of a type with its modifiers, as
// source.ColumnDef carries it: "int4", "varchar(16)", "numeric(10,2)",
// "_text" for a text array.
func (c *catalog) typeName(ctx context.Context, oid uint32, typmod int32) (string, error) {
	c.mu.Lock()
	name, ok := c.types[oid]
	c.mu.Unlock()
	if !ok {
		if err := c.conn.QueryRow(ctx, `SELECT typname FROM pg_type WHERE oid = $1`, oid).Scan(&name); err != nil {
			return "", fmt.Errorf("look up type %d: %w", oid, err)
		}
		c.mu.Lock()
		c.types[oid] = name
		c.mu.Unlock()
	}
	return withModifier(name, typmod), nil
}

// nameType names a type as the stream does (its TypeMessage, sent
// before a relation with a column of a type of the database's own):
// its name then, which the catalog may no longer have.
func (c *catalog) nameType(oid uint32, name string) {
	c.mu.Lock()
	c.types[oid] = name
	c.mu.Unlock()
}

// withModifier renders a type modifier the way PostgreSQL's format_type
// does, on the catalog name.
func withModifier(name string, typmod int32) string {
	if typmod < 0 {
		return name
	}
	switch name {
	case "varchar", "bpchar":
		if typmod >= 4 {
			return fmt.Sprintf("%s(%d)", name, typmod-4)
		}
	case "numeric":
		if typmod >= 4 {
			m := typmod - 4
			return fmt.Sprintf("numeric(%d,%d)", (m>>16)&0xffff, m&0xffff)
		}
	case "timestamp", "timestamptz", "time", "timetz", "bit", "varbit":
		return fmt.Sprintf("%s(%d)", name, typmod)
	}
	return name
}

// tableDef reads a table's current definition: columns in order, their
// types, nullability and primary-key positions. Stored generated columns
// are not among them: pgoutput does not send them (before PostgreSQL 18,
// and not by default after), so the replicated table has none; counting
// them made every row look like a schema change that dropped them.
func (c *catalog) tableDef(ctx context.Context, qualified string) (*source.TableDef, error) {
	def, _, err := c.tableDefKind(ctx, qualified)
	return def, err
}

// relInfo is what a chunk's read learns of its table with its
// definition: whether it is a plain one (not partitioned; fromTable), and
// how many rows the planner's statistics say it has (pg_class.reltuples;
// 0 where it has none: never analyzed, or partitioned).
type relInfo struct {
	plain bool
	rows  int
}

// tableDefKind is tableDef, and relInfo as the same read found it: a
// chunk's read asks both, in one round trip.
func (c *catalog) tableDefKind(ctx context.Context, qualified string) (*source.TableDef, relInfo, error) {
	var info relInfo
	schema, table := model.SplitTableName(qualified)
	version, err := c.serverVersion(ctx)
	if err != nil {
		return nil, info, err
	}
	notGenerated := ""
	if version >= 120000 {
		notGenerated = " AND a.attgenerated = ''"
	}
	rows, err := c.conn.Query(ctx, `
SELECT a.attname, t.typname, a.atttypmod, NOT a.attnotnull,
       COALESCE(array_position((string_to_array(i.indkey::text, ' ')::int2[])[1:i.indnkeyatts], a.attnum), 0),
       r.relkind = 'r', GREATEST(r.reltuples, 0)::int8
FROM pg_attribute a
JOIN pg_class r ON r.oid = a.attrelid
JOIN pg_namespace n ON n.oid = r.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE n.nspname = $1 AND r.relname = $2 AND r.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped`+notGenerated+`
ORDER BY a.attnum`, schema, table)
	if err != nil {
		return nil, info, err
	}
	defer rows.Close()
	def := &source.TableDef{Schema: schema, Name: table}
	for rows.Next() {
		var (
			col, typ string
			typmod   int32
			nullable bool
			keyPos   int32
		)
		var estimate int64
		if err := rows.Scan(&col, &typ, &typmod, &nullable, &keyPos, &info.plain, &estimate); err != nil {
			return nil, info, err
		}
		info.rows = int(min(estimate, 1<<40))
		def.Columns = append(def.Columns, source.ColumnDef{Name: col, Type: withModifier(typ, typmod), Nullable: nullable, KeyPos: int(keyPos)})
	}
	if err := rows.Err(); err != nil {
		return nil, info, err
	}
	if len(def.Columns) == 0 {
		return nil, info, fmt.Errorf("table %s does not exist in database %s (check the name and the tables= parameter)", qualified, c.conn.Config().Database)
	}
	return def, info, nil
}

// oidOf is a table's relation.
func (c *catalog) oidOf(ctx context.Context, table string) (uint32, error) {
	var oid int64
	err := c.conn.QueryRow(ctx, `SELECT $1::regclass::oid::int8`, quoteQualified(table)).Scan(&oid)
	return uint32(oid), err
}
