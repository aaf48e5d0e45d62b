package eventlog

import (
	"context"
	"reflect"
	"testing"

	"github.com/cdcctl/cdcctl/internal/engine/source"
	"github.com/cdcctl/cdcctl/internal/engine/transport"
	"github.com/cdcctl/cdcctl/internal/model"
)

// A log whose reader runs on the reading node is read from the node's own
// server, without the transport (the near client here has none: a call
// through it would panic), and the rows and cursors are the ones another
// node reads through the transport.
func TestALogOnThisNodeIsReadWithoutTheTransport(t *testing.T) {
	l, err := Open(t.TempDir(), 5, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.AppendPart([]source.Event{row(10, "a", source.OpInsert, v1), row(10, "b", source.OpInsert, v1), row(10, "c", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	ddl := source.Event{Kind: source.KindDDL, Table: "public.t", CommitTs: 25, Def: v2, SchemaVersion: 1, TableVersion: 25, Statement: "ALTER"}
	if err := l.Append([]source.Event{row(10, "d", source.OpInsert, v1)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]source.Event{ddl, row(26, "e", source.OpInsert, v2)}); err != nil {
		t.Fatal(err)
	}
	const cf = model.ChangefeedID("cf")
	srv, far := serveOnN1(cf, l)
	near := NewClient(nil, func(model.ChangefeedID) (model.NodeID, bool) { return "n1", true }, "n1", srv)

	ctx := context.Background()
	span := model.Span{Table: "public.t"}
	for _, c := range []struct {
		from source.Cursor
		upTo model.Ts
		max  int
	}{{after(5), 100, 2}, {source.Cursor{Done: 9, At: 10, Seq: 2}, 100, 2}, {after(10), 24, 10}, {after(25), 100, 10}} {
		got, gotNext, err := near.Read(ctx, cf, span, c.from, c.upTo, c.max)
		if err != nil {
			t.Fatal(err)
		}
		want, wantNext, err := far.Read(ctx, cf, span, c.from, c.upTo, c.max)
		if err != nil {
			t.Fatal(err)
		}
		if keys(got) != keys(want) || gotNext != wantNext || len(got) == 0 && c.upTo == 100 && c.from.Done < 25 {
			t.Errorf("read from %+v: near %s → %+v, through the transport %s → %+v", c.from, keys(got), gotNext, keys(want), wantNext)
		}
	}
	got, err := near.DDLs(ctx, cf, "public.t", 5, 100)
	if err != nil {
		t.Fatal(err)
	}
	want, err := far.DDLs(ctx, cf, "public.t", 5, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0].Def, want[0].Def) || got[0].CommitTs != 25 {
		t.Errorf("DDLs: near %+v, through the transport %+v", got, want)
	}
}

// Bytes that are not UTF-8 (a MySQL BINARY key, a BLOB) cross the
// transport as they are: keys, values and the span's bounds. JSON's
// strings hold only UTF-8, and such bytes arrived as U+FFFD on another
// capture, so rows were left out of the span or written changed.
func TestBytesThatAreNotUTF8CrossTheTransportAsTheyAre(t *testing.T) {
	l, err := Open(t.TempDir(), 5, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var evs []source.Event
	for _, k := range []string{"\x80\x00\x01", "\xc1\x07", "\xf0\x03\x1c", "\xff\xfe"} {
		evs = append(evs, row(10, k, source.OpInsert, v1))
	}
	if err := l.Append(evs); err != nil {
		t.Fatal(err)
	}
	const cf = model.ChangefeedID("cf")
	_, far := serveOnN1(cf, l)
	got, _, err := far.Read(context.Background(), cf, model.Span{Table: "public.t", Start: "\xc1", End: "\xff"}, after(5), 100, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("read %d rows of [\\xc1, \\xff) through the transport: %q; want 2", len(got), keys(got))
	}
	for i, want := range []string{"\xc1\x07", "\xf0\x03\x1c"} {
		if got[i].Key != want || got[i].New[0].Text != want {
			t.Errorf("row %d through the transport: key %q, value %q; want %q", i, got[i].Key, got[i].New[0].Text, want)
		}
	}
}

// serveOnN1 serves changefeed cf's log l on node n1 of a transport hub,
// and returns n1's server and a client on node n2, which reads it
// through the transport.
func serveOnN1(cf model.ChangefeedID, l *Log) (*Server, *Client) {
	srv := NewServer()
	srv.Put(cf, l)
	hub := transport.NewHub()
	srv.Register(hub.Join("n1"))
	far := NewClient(hub.Join("n2"), func(model.ChangefeedID) (model.NodeID, bool) { return "n1", true }, "n2", NewServer())
	return srv, far
}
