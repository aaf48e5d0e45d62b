package codec

import (
	"context"

	"github.com/cdcctl/cdcctl/internal/model"
)

// ReadBack is what a sink holds, read back and decoded: how verify sees
// a sink without naming it (the sink registry opens one by URI).
type ReadBack interface {
	// Rows visits every message the sink holds: per stream (a storage
	// sink's dispatcher in one table version, a Kafka partition) in the
	// order the stream holds them. Schema changes come as MessageDDL only
	// from a sink that carries them among its rows (DDLInline).
	Rows(ctx context.Context, visit func(stream string, kind MessageKind, row Row, ts model.Ts) error) error
	// DDLInline says whether Rows delivers schema changes among the rows,
	// in the order a consumer meets them (Kafka), so their placement can
	// be checked.
	DDLInline() bool
	// Changes reads every row change, grouped in streams as one writer
	// wrote them, and the schema changes the sink holds (canal-json or
	// CSV), to rebuild tables.
	Changes(ctx context.Context) ([]ChangeStream, []SchemaChange, error)
	// Transactions visits the BEGIN and END records of the source
	// transactions the sink holds, each a line of JSON (TxnRecord); ok
	// false when the sink writes none (no transaction-meta).
	Transactions(ctx context.Context, visit func(record []byte) error) (ok bool, err error)
	Close() error
}

// ChangeStream is what one writer (a storage sink's dispatcher in one
// table version; a Kafka partition's run of one table) wrote, decoded
// for rebuilding tables.
type ChangeStream struct {
	Dispatcher string
	// Reader, when set, names the order a consumer reads the stream in
	// with others of the same Reader, one after another as listed (a
	// Kafka partition, its reader's streams cut where positions go
	// back); empty, the stream is read alone (a storage writer's files).
	Reader   string
	Database string
	Table    string
	Version  uint64
	Changes  []Change
}

// SchemaChange is a schema change a sink holds: the statement that
// created a table version, at its position.
type SchemaChange struct {
	Database, Table string
	At              uint64
	Query           string
	// Key names the key columns of the table version the change made,
	// in the key's order, where the sink says (KeyKnown: a storage sink's
	// schema file does); none for a table without a key.
	Key      []string
	KeyKnown bool
}
