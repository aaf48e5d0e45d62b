package mysql

import (
	"bytes"
	"context"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// binlogEvents reads a binary log stream event by event, and a
// compressed transaction (MySQL's binlog_transaction_compression: its
// events, BEGIN, table maps, rows and commit, in one payload, which
// go-mysql decompresses and parses) as the events in it, in order, each
// ending where the payload ends: a resume point is never inside it.
// (Written, not run here: MariaDB compresses events one by one instead,
// as types of their own: rows.go.)
type binlogEvents struct {
	stream *replication.BinlogStreamer
	inner  []*replication.BinlogEvent // a payload's events not read yet
}

// next is the next event.
func (r *binlogEvents) next(ctx context.Context) (*replication.BinlogEvent, error) {
	for {
		if len(r.inner) > 0 {
			ev := r.inner[0]
			r.inner = r.inner[1:]
			return ev, nil
		}
		ev, err := r.stream.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		tp, ok := ev.Event.(*replication.TransactionPayloadEvent)
		if !ok {
			return ev, nil
		}
		for _, e := range tp.Events {
			h := *e.Header
			h.LogPos = ev.Header.LogPos
			if re, ok := e.Event.(*replication.RowsEvent); ok {
				ownValues(re.Rows)
			}
			r.inner = append(r.inner, &replication.BinlogEvent{RawData: e.RawData, Header: &h, Event: e.Event})
		}
	}
}

// ownValues gives a compressed transaction's rows text and bytes of their
// own. go-mysql decodes a row's strings over the buffer they were read
// from, which for such a transaction is its whole decompressed payload:
// a row the event log keeps in memory (counted by its text alone) would
// keep the payload, a 1 GiB transaction's gigabyte, until the row is
// trimmed. An event read on its own pins only its own few kilobytes.
func ownValues(rows [][]any) {
	for _, row := range rows {
		for i, v := range row {
			switch v := v.(type) {
			case string:
				row[i] = strings.Clone(v)
			case []byte:
				row[i] = bytes.Clone(v)
			}
		}
	}
}
