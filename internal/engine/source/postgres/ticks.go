package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdcctl/cdcctl/internal/model"
)

// An idle stream is resolved by ticks: messages this stream writes into
// the WAL carrying the server's clock (PostgreSQL 14 or later). A
// changefeed's checkpoint cannot pass the last position its stream
// resolved, so the time between ticks is the floor of an idle
// changefeed's lag: they were written with the status update, once a
// second, which alone kept an idle changefeed 0.5 s behind on average
// and 1 s at worst, before its heartbeats and persisting added theirs.

// tickEvery is the least time between two ticks of a stream. A tick is
// written only when the stream handed out no position for that long: a
// stream whose transactions keep committing, or that meets the ticks of
// the database's other changefeeds (any tick resolves every stream that
// reads past it), writes none of its own.
const tickEvery = 100 * time.Millisecond

// maybeTick writes a tick when one is due. At most one is in flight: a
// stream behind the WAL (catching up after a restart, or slowed by a
// large transaction) would otherwise leave ten a second to meet later,
// each decoded by every slot of the database. A tick that has not come
// back after statusInterval no longer holds the next one (the stream
// may have been read again from before it).
func (s *Stream) maybeTick(ctx context.Context) error {
	now := time.Now()
	if !s.ticks || now.Before(s.nextTick) {
		return nil
	}
	s.nextTick = now.Add(tickEvery)
	if now.Sub(s.resolvedAt) < tickEvery {
		return nil
	}
	if s.tickLSN != 0 && s.received < s.tickLSN && now.Sub(s.tickAt) < statusInterval {
		return nil
	}
	// The server's clock, written into the WAL as a non-transactional
	// message. When the stream reaches it, every transaction whose commit
	// record is before it has arrived; and since it is in the WAL,
	// reading the stream again from a resume point meets the same ticks
	// at the same places, so every position comes out the same.
	var lsn string
	if err := s.cat.conn.QueryRow(ctx, `SELECT pg_logical_emit_message(false, $1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text)::text`, tickPrefix).Scan(&lsn); err != nil {
		return fmt.Errorf("write a tick into the upstream's WAL: %w", explain(s.cfg, err))
	}
	p, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return err
	}
	s.tickLSN, s.tickAt = p, now
	return nil
}

// tick resolves the stream up to the clock a tick carries, less the
// margin. Any reader's tick will do: they are all in the WAL.
func (s *Stream) tick(m *pglogrepl.LogicalDecodingMessage) (Item, bool, error) {
	us, err := strconv.ParseInt(string(m.Content), 10, 64)
	if err != nil {
		return Item{}, false, nil // not one of ours after all
	}
	s.received = max(s.received, m.LSN)
	res := model.TsFromTime(time.UnixMicro(us).Add(-resolvedMargin))
	if res <= s.last {
		return Item{}, false, nil
	}
	s.last = res
	return Item{Resolved: res, ResolvedLSN: m.LSN}, true, nil
}
