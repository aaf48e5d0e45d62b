package source

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cdcctl/cdcctl/internal/model"
)

// handedLog is an event log whose next read returns what the test
// handed it, once; reads find nothing otherwise.
type handedLog struct {
	mu   sync.Mutex
	next []Event
}

func (l *handedLog) hand(evs ...Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next = append(l.next, evs...)
}

func (l *handedLog) Read(_ context.Context, _ model.ChangefeedID, _ model.Span, from Cursor, _ model.Ts, _ int) ([]Event, Cursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.next
	l.next = nil
	if len(evs) == 0 {
		return nil, from, nil
	}
	return evs, Cursor{Done: evs[len(evs)-1].CommitTs}, nil
}

func (l *handedLog) DDLs(context.Context, model.ChangefeedID, string, model.Ts, model.Ts) ([]Event, error) {
	return nil, nil
}

// heldChunks is a database whose chunk reads wait for the test: each
// call is announced with where it starts, and answers with the keys the
// test releases it with, and then whether its reader kept it.
type heldChunks struct {
	def        *TableDef
	calls      chan model.CopyProgress
	answer     chan []string
	registered chan bool
	mu         sync.Mutex
	read       []*Chunk   // registered, in order
	asks       []ChunkAsk // of every call, in order
}

func (h *heldChunks) ReadChunk(ctx context.Context, span model.Span, copied model.CopyProgress, ask ChunkAsk, register func(*Chunk) bool, loaded func(*Chunk)) (*Chunk, error) {
	h.mu.Lock()
	h.asks = append(h.asks, ask)
	h.mu.Unlock()
	h.calls <- copied
	keys := <-h.answer
	c := NewChunk(span.Table, h.def, ask.Rows)
	ok := register(c)
	h.registered <- ok
	if !ok {
		return nil, nil
	}
	for _, k := range keys {
		if err := c.AddRow([][]byte{[]byte(k)}, []int{0}, ""); err != nil {
			return nil, err
		}
	}
	c.Loaded()
	loaded(c)
	h.mu.Lock()
	h.read = append(h.read, c)
	h.mu.Unlock()
	return c, nil
}

func (h *heldChunks) ask(i int) ChunkAsk {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asks[i]
}

func (h *heldChunks) chunks() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.read)
}

func (h *heldChunks) chunk(i int) *Chunk {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.read[i]
}

// A partition's next chunk is read while the one before waits for its
// high watermark, without waiting for the dispatcher's next call (it may
// be backing off, up to 160 ms); and a chunk whose read began before the
// high watermark of the one before it came, and registered while that
// one's rows were going out, is kept: it was dropped and read again (the
// MySQL snapshot benchmark's timeline showed a quarter of the chunks
// read twice, and the partitions idle between chunks).
func TestTheNextChunkIsReadWhileTheOneBeforeGoesOut(t *testing.T) {
	def := &TableDef{Columns: []ColumnDef{{Name: "k", Type: "text"}}}
	db := &heldChunks{def: def, calls: make(chan model.CopyProgress, 4), answer: make(chan []string), registered: make(chan bool, 4)}
	log := &handedLog{}
	s := NewLogSource(Env{Changefeed: "cf", Logs: log}, []string{"t"}, 0)
	r := s.NewCopyReader(model.Span{Table: "t"}, 10, model.CopyProgress{}, CopyOptions{Chunks: db, ChunkRows: 2, Slots: &ChunkSlots{}})
	defer func() {
		close(db.answer) // a fetch still waiting gives up
		r.Close()
	}()
	ctx := context.Background()
	mark := func(ts model.Ts, kind string, c *Chunk) Event {
		b, _ := json.Marshal(Mark{Kind: kind, ID: c.ID, Table: "t"})
		return Event{Kind: KindMark, Table: "t", CommitTs: ts, Def: def, Statement: string(b)}
	}
	call := func(what string) model.CopyProgress {
		t.Helper()
		select {
		case from := <-db.calls:
			return from
		case <-time.After(10 * time.Second):
			t.Fatalf("no chunk read %s", what)
		}
		return model.CopyProgress{}
	}
	var got []string
	read := func(max int) {
		t.Helper()
		evs, err := r.Read(ctx, 100, max)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			got = append(got, e.Key)
		}
	}

	read(10) // starts the first chunk's read
	if from := call("at the first read"); from.To != "" {
		t.Fatalf("the first chunk starts after %q", from.To)
	}
	db.answer <- []string{"a", "b"}
	<-db.registered
	// No read by the dispatcher in between: the next chunk starts as the
	// first is loaded.
	if from, want := call("while the first chunk waits for its high watermark"), (model.CopyProgress{}).CopiedThrough("b"); from.To != want.To {
		t.Fatalf("the second chunk starts at %q, want %q (after b)", from.To, want.To)
	}
	first := db.chunk(0)
	log.hand(mark(11, "low", first), mark(12, "high", first))
	read(1) // the first chunk's high watermark: its rows go out, one at a time
	if len(got) != 1 {
		t.Fatalf("read %v, want the first chunk's first row", got)
	}
	db.answer <- []string{"c"} // the second chunk registers while the first's rows go out
	if !<-db.registered {
		t.Fatal("the second chunk, whose read began before the first's high watermark, was dropped as its rows went out")
	}
	read(10)
	for try := 0; db.chunks() < 2; try++ {
		if try > 1000 {
			t.Fatal("the second chunk was not loaded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	second := db.chunk(1)
	log.hand(mark(13, "low", second), mark(14, "high", second))
	read(10)
	if want := []string{"a", "b", "c"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("read %q, want %q", got, want)
	}
	if c := r.Copied(); !c.Done {
		t.Fatalf("copied %+v after the last chunk, want done", c)
	}
	select {
	case from := <-db.calls:
		t.Fatalf("a third chunk read, from %+v: the second ended the range", from)
	default:
	}
}

// A partition's first chunk, whose rows' size is not known, may read on
// up to the chunk rows once its first rows tell it (ChunkAsk.Most); the
// chunks after are sized by the rows before and do not grow; nor does a
// first chunk under a snapshot's rate, which reads what it reserved.
func TestOnlyAFirstChunkMayGrow(t *testing.T) {
	def := &TableDef{Columns: []ColumnDef{{Name: "k", Type: "text"}}}
	keys := make([]string, firstChunkRows)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%05d", i)
	}
	for _, pace := range []*Pace{nil, NewPace(1_000_000)} {
		db := &heldChunks{def: def, calls: make(chan model.CopyProgress, 4), answer: make(chan []string), registered: make(chan bool, 4)}
		s := NewLogSource(Env{Changefeed: "cf", Logs: &handedLog{}}, []string{"t"}, 0)
		r := s.NewCopyReader(model.Span{Table: "t"}, 10, model.CopyProgress{}, CopyOptions{Chunks: db, Slots: &ChunkSlots{}, Pace: pace})
		if _, err := r.Read(context.Background(), 100, 10); err != nil {
			t.Fatal(err)
		}
		<-db.calls
		first := ChunkAsk{Rows: firstChunkRows, Most: DefaultChunkRows}
		if pace != nil {
			first.Most = firstChunkRows
		}
		if got := db.ask(0); got != first {
			t.Fatalf("paced %v: the first chunk asks %+v, want %+v", pace != nil, got, first)
		}
		db.answer <- keys // a full chunk: the range holds more
		<-db.registered
		<-db.calls
		if got := db.ask(1); got.Most != got.Rows || got.Rows != nextChunkRows(db.chunk(0), DefaultChunkRows) || got.Rows <= firstChunkRows {
			t.Fatalf("paced %v: the second chunk asks %+v, want the rows sized by the first's, and no more", pace != nil, got)
		}
		close(db.answer)
		r.Close()
	}
}
