package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// Resumable says whether the server at uri can go on from the resume
// point pos: the checks a reader makes before it streams (sameSystem,
// slotBefore), made when an update changes a changefeed's connection, so
// that a server of another cluster, or a slot past the changefeed's
// position, is refused before anything is written rather than fail the
// changefeed when it resumes. A resume point that names no cluster (one
// written before they were kept) is checked for the slot alone.
func Resumable(ctx context.Context, uri string, pos source.Position) error {
	cfg, err := ParseURI(uri)
	if err != nil || len(pos) == 0 {
		return err
	}
	var p position
	if err := json.Unmarshal(pos, &p); err != nil {
		return fmt.Errorf("the changefeed's stored resume point does not decode: %w", err)
	}
	from, err := pglogrepl.ParseLSN(p.LSN)
	if err != nil {
		return fmt.Errorf("the changefeed's stored resume point: %w", err)
	}
	pc, err := pgconn.ParseConfig(cfg.ConnString)
	if err != nil {
		return err
	}
	pc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return explain(cfg, err)
	}
	defer conn.Close(context.Background())
	id, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return explain(cfg, err)
	}
	if err := sameSystem(serverName(pc, conn), p.System, id.SystemID, from); err != nil {
		return err
	}
	cat, err := openCatalog(ctx, cfg.ConnString)
	if err != nil {
		return explain(cfg, err)
	}
	defer cat.Close()
	return slotBefore(ctx, cat.conn, cfg, from)
}
