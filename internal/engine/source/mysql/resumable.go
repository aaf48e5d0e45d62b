package mysql

import (
	"context"
	"errors"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcctl/cdcctl/internal/engine/source"
)

// probeWait bounds how long Resumable waits for the server's first word
// on a binary log dump: a server that says nothing in that time is not
// refused (a slow server is the reader's to wait for).
const probeWait = 10 * time.Second

// Resumable says whether the server at uri can still give the binary log
// from the resume point pos, before a changefeed resumes there or takes
// a new connection: it asks for the dump exactly as the reader will (by
// GTID where the point has them, else by file and offset on their
// server), and reads until the server has opened the log, or refused it.
// A purged position is ErrPurged, which wraps source.ErrUnresumable; a
// point on another server without GTIDs is refused as the reader would
// be. Asked under the changefeed's own server id, as only a stopped
// changefeed is: a reader still stopping under it is ended the sooner.
// What the server does not say within probeWait is no refusal.
func Resumable(ctx context.Context, uri string, pos source.Position) error {
	cfg, err := ParseURI(uri)
	if err != nil || len(pos) == 0 || cfg.ServerID == 0 {
		return err
	}
	p := NewPuller(cfg, "", "", nil)
	c, err := p.connect(ctx, pos)
	if err != nil {
		return err
	}
	defer c.syncer.Close()
	wctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	for {
		ev, err := c.stream.GetEvent(wctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return nil
			}
			return p.explainStream(err, c.at)
		}
		// The server opens the log before its format description, and
		// refuses a purged position before either (its fake rotate
		// comes first).
		if _, ok := ev.Event.(*replication.FormatDescriptionEvent); ok {
			return nil
		}
	}
}
