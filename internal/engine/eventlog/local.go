package eventlog

import (
	"context"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Local reads one log in this process, as the reader's node answers
// remote reads (source.LogReader): for a source and its log side by side,
// as tests and benchmarks run them.
type Local struct{ Log *Log }

// Read implements source.LogReader.
func (x Local) Read(_ context.Context, _ model.ChangefeedID, span model.Span, from source.Cursor, upTo model.Ts, max int) ([]source.Event, source.Cursor, error) {
	return x.Log.Read(span, from, upTo, max)
}

// DDLs implements source.LogReader.
func (x Local) DDLs(_ context.Context, _ model.ChangefeedID, table string, from, upTo model.Ts) ([]source.Event, error) {
	return x.Log.DDLs(table, from, upTo), nil
}

// Changed implements source.LogWatcher.
func (x Local) Changed(model.ChangefeedID) <-chan struct{} { return x.Log.Changed() }
