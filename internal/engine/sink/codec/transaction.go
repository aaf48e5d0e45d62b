package codec

import (
	"strconv"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Transaction boundaries (a sink's transaction-meta) in the layout of
// Debezium's transaction metadata, which its consumers already read: each
// row of a source transaction carries a "transaction" block (its id, its
// place in the whole transaction, its place among the transaction's rows
// of its table), and each transaction has a BEGIN and an END record, the
// END with the event counts a consumer waits for before it applies the
// transaction at once. The id is the transaction's commit ts in decimal
// (row.TxnID), the same in the rows and in both records.

// appendTxnPosition appends a row's ,"transaction":{...} member.
func appendTxnPosition(b []byte, e *row.Event) []byte {
	b = append(b, `,"transaction":{"id":"`...)
	b = strconv.AppendUint(b, uint64(e.CommitTs), 10)
	b = append(b, `","total_order":`...)
	b = strconv.AppendUint(b, uint64(e.TxnOrder), 10)
	b = append(b, `,"data_collection_order":`...)
	b = strconv.AppendUint(b, uint64(e.TxnTableOrder), 10)
	return append(b, '}')
}

// TxnRecord is a BEGIN or END record of a source transaction.
type TxnRecord struct {
	Status string `json:"status"` // TxnBegin or TxnEnd
	ID     string `json:"id"`
	// TsMs is the transaction's commit time at the source.
	TsMs int64 `json:"ts_ms"`
	// EventCount and DataCollections are the END's (null in a BEGIN):
	// the transaction's rows in all and by table ("schema.table").
	EventCount      *int             `json:"event_count"`
	DataCollections []DataCollection `json:"data_collections"`
	// CommitTs and SourceID are cdcctl's additions: the id as a number,
	// and the transaction's id at the source when it tells one
	// (PostgreSQL "xid:commit LSN", MySQL's GTID; row.TxnSummary).
	CommitTs uint64 `json:"commitTs"`
	SourceID string `json:"source_id,omitempty"`
}

// DataCollection is one table's share of a transaction.
type DataCollection struct {
	DataCollection string `json:"data_collection"`
	EventCount     int    `json:"event_count"`
}

// The statuses of transaction records.
const (
	TxnBegin = "BEGIN"
	TxnEnd   = "END"
)

// AppendTxnRecords appends a transaction's BEGIN and END records, one
// JSON object per line, from its summary (a row.KindTxn event). Tables
// are named as the upstream names them ("schema.table"), as the rows'
// database and table fields say them.
func AppendTxnRecords(b []byte, e *row.Event) []byte {
	b = AppendTxnRecord(b, TxnBegin, e)
	b = append(b, '\n')
	b = AppendTxnRecord(b, TxnEnd, e)
	return append(b, '\n')
}

// AppendTxnRecord appends one record of a transaction's summary (no
// newline): TxnBegin (no counts) or TxnEnd.
func AppendTxnRecord(b []byte, status string, e *row.Event) []byte {
	ts, t := e.CommitTs, e.Txn
	b = append(b, `{"status":"`...)
	b = append(b, status...)
	b = append(b, `","id":"`...)
	b = strconv.AppendUint(b, uint64(ts), 10)
	b = append(b, `","ts_ms":`...)
	b = strconv.AppendInt(b, ts.Millis(), 10)
	if status == TxnBegin || t == nil {
		b = append(b, `,"event_count":null,"data_collections":null`...)
	} else {
		b = append(b, `,"event_count":`...)
		b = strconv.AppendInt(b, int64(t.Events), 10)
		b = append(b, `,"data_collections":[`...)
		for i, c := range t.Tables {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"data_collection":`...)
			b = appendJSONString(b, c.Table)
			b = append(b, `,"event_count":`...)
			b = strconv.AppendInt(b, int64(c.Events), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"commitTs":`...)
	b = strconv.AppendUint(b, uint64(ts), 10)
	if t != nil && t.SourceID != "" {
		b = append(b, `,"source_id":`...)
		b = appendJSONString(b, t.SourceID)
	}
	return append(b, '}')
}

// TxnKey is the message key of a transaction's records (Debezium keys
// them by id): {"id":"<id>"}.
func TxnKey(ts model.Ts) []byte {
	return []byte(`{"id":"` + row.TxnID(ts) + `"}`)
}
