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
// A purged position is ErrPurged, which wraps source.ErrUnresumable;
// a point on another server without GTIDs is an error as the reader's
// would be (an update is refused for it, a resume left to the reader).
// Asked under the changefeed's own server id, as only a stopped
// changefeed is: a reader still stopping under it is ended the sooner.
// What the server does not say by ctx's end, or within probeWait, is no
// refusal; go-mysql's connection and registration do not heed ctx, so
// they are waited for only that long.
func Resumable(ctx context.Context, uri string, pos source.Position) error {
	cfg, err := ParseURI(uri)
	if err != nil || len(pos) == 0 || cfg.ServerID == 0 {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	answer := make(chan error, 1)
	go func() { answer <- probe(wctx, cfg, pos) }()
	select {
	case err = <-answer:
	case <-wctx.Done():
		err = wctx.Err()
	}
	if wctx.Err() != nil && ctx.Err() == nil && (err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return nil // the server said nothing in time: no refusal
	}
	return err
}

// probe asks for the dump from pos and reads until the server's format
// description (it refuses a purged position before it, its fake rotate
// coming first); ctx's end before any answer is none.
func probe(ctx context.Context, cfg Config, pos source.Position) error {
	p := NewPuller(cfg, "", "", nil)
	c, err := p.connect(ctx, pos)
	if err != nil {
		return err
	}
	defer c.syncer.Close()
	for {
		ev, err := c.stream.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return p.explainStream(err, c.at)
		}
		if _, ok := ev.Event.(*replication.FormatDescriptionEvent); ok {
			return nil
		}
	}
}
