package codec

import (
	"encoding/json"
	"fmt"

	"github.com/cdcctl/cdcctl/internal/engine/row"
	"github.com/cdcctl/cdcctl/internal/model"
)

// canalEnvelope is the part of a canal-json message that tells its kind.
type canalEnvelope struct {
	Table string `json:"table"`
	IsDdl bool   `json:"isDdl"`
	Type  string `json:"type"`
	TiDB  struct {
		CommitTs    uint64 `json:"commitTs"`
		WatermarkTs uint64 `json:"watermarkTs"`
	} `json:"_tidb"`
}

// MessageKind tells rows, DDLs and watermarks apart.
type MessageKind int

const (
	MessageRow MessageKind = iota + 1
	MessageDDL
	MessageWatermark
)

// EncodeCanalDDL returns the canal-json message of a DDL.
func EncodeCanalDDL(schema string, e *row.Event) ([]byte, error) {
	ms := e.CommitTs.Millis()
	db, table := Names(schema, e)
	return json.Marshal(map[string]any{
		"id": 0, "database": db, "table": table, "pkNames": nil, "isDdl": true, "type": ddlType(e),
		"es": ms, "ts": ms, "sql": e.Statement, "sqlType": nil, "mysqlType": nil, "data": nil, "old": nil,
		"_tidb": map[string]uint64{"commitTs": uint64(e.CommitTs)},
	})
}

// EncodeWatermark returns TiCDC's canal-json watermark message: every row
// up to ts has been delivered before it.
func EncodeWatermark(ts model.Ts) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": 0, "database": "", "table": "", "pkNames": nil, "isDdl": false, "type": "TIDB_WATERMARK",
		"es": ts.Millis(), "ts": ts.Millis(), "sql": "", "sqlType": nil, "mysqlType": nil, "data": nil, "old": nil,
		"_tidb": map[string]uint64{"watermarkTs": uint64(ts)},
	})
	return b
}

// DecodeCanalMessage reads one canal-json message: a row, a DDL (its
// table in the row, its commit ts) or a watermark (its ts).
func DecodeCanalMessage(data []byte) (MessageKind, Row, model.Ts, error) {
	var env canalEnvelope
	if err := json.Unmarshal(data, &env); err != nil {
		return 0, Row{}, 0, err
	}
	switch {
	case env.Type == "TIDB_WATERMARK":
		return MessageWatermark, Row{}, model.Ts(env.TiDB.WatermarkTs), nil
	case env.IsDdl:
		return MessageDDL, Row{Table: env.Table}, model.Ts(env.TiDB.CommitTs), nil
	}
	rows, err := DecodeRows(ProtocolCanalJSON, data)
	if err != nil {
		return 0, Row{}, 0, err
	}
	if len(rows) != 1 {
		return 0, Row{}, 0, fmt.Errorf("a message holds %d rows, want 1", len(rows))
	}
	return MessageRow, rows[0], rows[0].CommitTs, nil
}

// ddlType is canal's event type of a DDL message.
func ddlType(e *row.Event) string {
	if row.IsTruncate(e) {
		return "TRUNCATE"
	}
	return "ALTER"
}
