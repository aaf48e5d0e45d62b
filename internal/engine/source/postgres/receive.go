package postgres

// The receive loop of a Stream: the replication connection's messages
// read, pgoutput's messages decoded into transactions (or parts of a
// large one), standby status sent back, and the positions given to what
// is read. Opening and closing a stream is stream.go's.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Next returns the next committed transaction or resolved position. It
// waits until there is one or ctx ends.
func (s *Stream) Next(ctx context.Context) (Item, error) {
	for {
		err := s.maybeSendStatus(ctx, false)
		if err == nil {
			err = s.maybeTick(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				// Stopped: pgx ends a statement ctx cut short with errors
				// of its own ("failed to deallocate cached statement(s):
				// conn closed"), which are not a failure of the stream.
				return Item{}, ctx.Err()
			}
			return Item{}, err
		}
		until := s.nextStatus
		if s.ticks && s.nextTick.Before(until) {
			until = s.nextTick
		}
		rctx, cancel := context.WithDeadline(ctx, until)
		raw, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return Item{}, ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				if why := publicationGone(s.cfg, pgErr.Code, pgErr.Message, pgErr.Routine); why != "" {
					return Item{}, fmt.Errorf("%s (%w)", why, source.ErrUnresumable)
				}
			}
			return Item{}, fmt.Errorf("replication stream of slot %s: %w", s.cfg.Slot, explain(s.cfg, err))
		}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			if why := publicationGone(s.cfg, msg.Code, msg.Message, msg.Routine); why != "" {
				return Item{}, fmt.Errorf("%s (%w)", why, source.ErrUnresumable)
			}
			return Item{}, fmt.Errorf("replication stream of slot %s: PostgreSQL: %s [SQLSTATE %s]", s.cfg.Slot, msg.Message, msg.Code)
		case *pgproto3.CopyData:
			item, ok, err := s.handle(ctx, msg.Data)
			if err != nil || ok {
				if item.Txn != nil || item.Resolved != 0 {
					s.resolvedAt = time.Now()
				}
				return item, err
			}
		}
	}
}

func (s *Stream) maybeSendStatus(ctx context.Context, now bool) error {
	if !now && time.Now().Before(s.nextStatus) {
		return nil
	}
	if !s.ticks && s.probeLSN == 0 {
		// Where the WAL ends now, by the server's clock: a resolved
		// position once the stream has passed it.
		var lsn string
		var at time.Time
		if err := s.cat.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text, clock_timestamp()`).Scan(&lsn, &at); err != nil {
			return fmt.Errorf("read the upstream's WAL position: %w", explain(s.cfg, err))
		}
		p, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return err
		}
		s.probeLSN, s.probeAt = p, at
	}
	confirmed := pglogrepl.LSN(s.confirmed.Load())
	// Asking for a reply makes the server answer with a keepalive: the
	// resolved position of an idle upstream moves every interval.
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: max(s.received, confirmed), WALFlushPosition: confirmed, WALApplyPosition: confirmed, ReplyRequested: true,
	})
	if err != nil {
		return fmt.Errorf("replication status to slot %s: %w", s.cfg.Slot, err)
	}
	s.nextStatus = time.Now().Add(statusInterval)
	return nil
}

// handle takes one CopyData message; ok when it completes an item.
func (s *Stream) handle(ctx context.Context, data []byte) (Item, bool, error) {
	if len(data) == 0 {
		return Item{}, false, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return Item{}, false, err
		}
		if ka.ReplyRequested {
			if err := s.maybeSendStatus(ctx, true); err != nil {
				return Item{}, false, err
			}
		}
		if s.open {
			return Item{}, false, nil
		}
		s.received = max(s.received, ka.ServerWALEnd)
		// The keepalive's WAL end is what the server has decoded and
		// sent. Once it passes the WAL position a probe read, every
		// transaction that committed before the probe's clock has
		// arrived. (The keepalive's own clock says nothing of the kind:
		// a walsender behind on decoding answers with the time now.)
		if s.ticks || s.probeLSN == 0 || s.received < s.probeLSN {
			return Item{}, false, nil
		}
		res := model.TsFromTime(s.probeAt.Add(-resolvedMargin))
		s.probeLSN = 0
		if res <= s.last {
			return Item{}, false, nil
		}
		s.last = res
		return Item{Resolved: res, ResolvedLSN: ka.ServerWALEnd}, true, nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return Item{}, false, err
		}
		msg, err := pglogrepl.Parse(x.WALData)
		if err != nil {
			return Item{}, false, fmt.Errorf("decode pgoutput message: %w", err)
		}
		return s.decode(ctx, msg)
	}
	return Item{}, false, nil
}

// decode applies one pgoutput message to the open transaction.
func (s *Stream) decode(ctx context.Context, msg pglogrepl.Message) (Item, bool, error) {
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		s.open, s.xid, s.base, s.ddls, s.rows, s.size, s.parted, s.marks, s.again, s.recheck, s.pubBefore = true, m.Xid, s.next(m.CommitTime), nil, nil, 0, false, nil, nil, nil, nil
		clear(s.pendingNums)
		clear(s.partedTables)
		s.resetTables()
	case *pglogrepl.TypeMessage:
		// A type of the database's own (an enum, a domain, a composite)
		// named as it was at this point: the relation after it may have
		// a column of a type dropped or renamed since, which the catalog
		// no longer names (its lookup held the table).
		s.cat.nameType(m.DataType, m.Name)
	case *pglogrepl.RelationMessage:
		return Item{}, false, s.relation(ctx, m)
	case *pglogrepl.InsertMessage:
		return s.part(s.row(m.RelationID, source.OpInsert, m.Tuple, nil, false))
	case *pglogrepl.UpdateMessage:
		return s.part(s.row(m.RelationID, source.OpUpdate, m.NewTuple, m.OldTuple, m.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld))
	case *pglogrepl.DeleteMessage:
		return s.part(s.row(m.RelationID, source.OpDelete, nil, m.OldTuple, m.OldTupleType == pglogrepl.DeleteMessageTupleTypeOld))
	case *pglogrepl.TruncateMessage:
		if err := s.truncate(ctx, m); err != nil || len(s.erase) == 0 {
			return Item{}, false, err
		}
		erase := s.erase
		s.erase = nil
		return Item{Erase: erase}, true, nil
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix == markPrefix && m.Transactional && s.open {
			if s.relabelMarked(m.Content) || s.rewriteMarked(m.Content) || s.publicationMarked(m.Content) || s.unloggedMarked(m.Content) {
				return Item{}, false, nil
			}
			if taken, err := s.relationMarked(ctx, m.Content); taken || err != nil {
				return Item{}, false, err
			}
			s.marks = append(s.marks, append([]byte(nil), m.Content...))
		}
		if m.Prefix == tickPrefix && !m.Transactional && !s.open && s.ticks {
			return s.tick(m)
		}
	case *pglogrepl.CommitMessage:
		if err := s.recheckColumns(ctx); err != nil {
			return Item{}, false, err
		}
		return s.commit(m), true, nil
	}
	return Item{}, false, nil
}

// part hands out the open transaction's rows as a part once they pass
// the bounds of memory.
func (s *Stream) part(err error) (Item, bool, error) {
	if err != nil || len(s.rows) < partRows && s.size < partBytes {
		return Item{}, false, err
	}
	rows := s.rows
	for _, e := range rows {
		s.partedTables[e.Table] = true
	}
	s.rows, s.size, s.parted = nil, 0, true
	return Item{Part: rows}, true, nil
}

// commit completes the transaction: its schema changes become the
// tables' schemas, and the rows not handed out in parts go with it.
func (s *Stream) commit(m *pglogrepl.CommitMessage) Item {
	tx := &Txn{Ts: s.rowsTs(), Xid: s.xid, CommitTime: m.CommitTime, CommitLSN: m.CommitLSN, EndLSN: m.TransactionEndLSN, Parted: s.parted}
	for _, d := range s.ddls {
		st := s.tables[d.Table]
		st.Def, st.Version, st.Since = d.Def, d.SchemaVersion, d.CommitTs
		if nums, changed := s.pendingNums[d.Table]; changed {
			st.Nums = nums
		}
		tx.Events = append(tx.Events, d)
	}
	clear(s.pendingNums)
	for _, a := range s.again {
		if st := s.tables[a.Table]; st != nil && a.Why == againRewritten && !a.described {
			st.RewriteCols = a.cols
		}
	}
	tx.Events = append(tx.Events, s.rows...)
	tx.Marks, tx.Again = s.marks, s.again
	s.last = tx.Ts
	s.received = max(s.received, m.TransactionEndLSN)
	s.open, s.ddls, s.rows, s.size, s.parted, s.marks, s.again = false, nil, nil, 0, false, nil, nil
	return Item{Txn: tx}
}

// rowsTs is the open transaction's rows' position.
func (s *Stream) rowsTs() model.Ts { return s.base + ddlSlots }

// next is the position after the last one for a commit at t: the commit
// time with microseconds in the logical bits, or one more than the last.
func (s *Stream) next(t time.Time) model.Ts {
	return max(model.TsFromMicros(t.UnixMicro()), s.last+1)
}
